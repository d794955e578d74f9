// Kernels of the CUDA layer's microbenchmarks (lagc cuda-bench): launch
// cost, copy bandwidth and a small kernel for NVRTC compile time.

// y = a*x + y
template <typename T>
__global__ void axpy(long long n, float a, const T* __restrict__ x, T* __restrict__ y) {
  pdl_wait();
  LAGC_FOR(i, n) { y[i] = from_f32<T>(a * to_f32(x[i]) + to_f32(y[i])); }
}

// Does nothing: measures launch cost.
extern "C" __global__ void noop() { pdl_wait(); }

// dst = src, 16 bytes per thread and step (n16 = bytes/16).
extern "C" __global__ void copy16(long long n16, const uint4* __restrict__ src, uint4* __restrict__ dst) {
  pdl_wait();
  LAGC_FOR(i, n16) { dst[i] = src[i]; }
}
