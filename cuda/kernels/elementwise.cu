// Simple element-wise kernels: the first numerics checks of the CUDA layer,
// and building blocks for tests and benchmarks.

// y = a*x + y
template <typename T>
__global__ void axpy(long long n, float a, const T* __restrict__ x, T* __restrict__ y) {
  LAGC_FOR(i, n) { y[i] = from_f32<T>(a * to_f32(x[i]) + to_f32(y[i])); }
}

// out = (T)in: converts between any two dtypes through float.
template <typename In, typename Out>
__global__ void cast(long long n, const In* __restrict__ in, Out* __restrict__ out) {
  LAGC_FOR(i, n) { out[i] = from_f32<Out>(to_f32(in[i])); }
}

// out[i] = start + i*step
template <typename T>
__global__ void iota(long long n, float start, float step, T* __restrict__ out) {
  LAGC_FOR(i, n) { out[i] = from_f32<T>(start + (float)i * step); }
}

// Does nothing: measures launch cost.
extern "C" __global__ void noop() {}

// dst = src, 16 bytes per thread and step (n16 = bytes/16).
extern "C" __global__ void copy16(long long n16, const uint4* __restrict__ src, uint4* __restrict__ dst) {
  LAGC_FOR(i, n16) { dst[i] = src[i]; }
}
