// Synthetic weights for benchmarks, made on the device.

// A 32-bit mix of (seed, index) (the murmur3 finaliser).
__device__ __forceinline__ unsigned int fill_mix(unsigned int seed, unsigned long long i) {
  unsigned int h = seed ^ (unsigned int)i ^ ((unsigned int)(i >> 32) * 0x9e3779b9u);
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// out[i] = offset + scale * u, u uniform in [-1, 1) from a hash of the
// index: synthetic weights of any size made on the device, no host copy.
template <typename T>
__global__ void fill_hash(long long n, unsigned int seed, float offset, float scale, T* __restrict__ out) {
  pdl_wait();
  LAGC_FOR(i, n) {
    float u = (float)(fill_mix(seed, (unsigned long long)i) >> 8) * (1.f / 8388608.f) - 1.f;
    out[i] = from_f32<T>(offset + scale * u);
  }
}
