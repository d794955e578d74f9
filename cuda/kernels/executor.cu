// Kernels of the executor itself (exec/gpu): decode-step bookkeeping for
// the captured graph, strided copies for split/concat, and synthetic weights
// for benchmarks.

// After a decode step: its argmax becomes the next step's token and the
// position advances, on the device, so the next replay of the captured
// graph needs nothing from the host.
extern "C" __global__ void step_next(const int* __restrict__ next, int* __restrict__ tokens, int* __restrict__ pos) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    tokens[0] = next[0];
    pos[0] += 1;
  }
}

// out[r*ldo + c] = in[r*ldi + c] for r < rows, c < cols: one piece of a
// split or concat along an inner axis.
template <typename T>
__global__ void copy_rows(long long rows, long long cols, const T* __restrict__ in, long long ldi,
                          T* __restrict__ out, long long ldo) {
  LAGC_FOR(i, rows * cols) {
    long long r = i / cols, c = i - r * cols;
    out[r * ldo + c] = in[r * ldi + c];
  }
}

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
  LAGC_FOR(i, n) {
    float u = (float)(fill_mix(seed, (unsigned long long)i) >> 8) * (1.f / 8388608.f) - 1.f;
    out[i] = from_f32<T>(offset + scale * u);
  }
}

// Routes of a moe_grouped with shared experts: token t's k routed experts
// and their weights, then the shared experts first..first+S-1 with weight 1
// (they sit at the end of the stacks and serve every token).
extern "C" __global__ void moe_add_shared(int T, int k, int S, int first, const float* __restrict__ w,
                                          const int* __restrict__ ids, float* __restrict__ w2, int* __restrict__ ids2) {
  long long n = (long long)T * (k + S);
  LAGC_FOR(i, n) {
    long long t = i / (k + S);
    int j = (int)(i - t * (k + S));
    if (j < k) {
      w2[i] = w[t * k + j];
      ids2[i] = ids[t * k + j];
    } else {
      w2[i] = 1.f;
      ids2[i] = first + (j - k);
    }
  }
}
