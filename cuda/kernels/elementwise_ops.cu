// Element-wise ops of the Laguna graph, float32 math on any storage dtype.
// out may alias an input (each element is read before it is written by the
// same thread).

// silu(x) = x / (1 + exp(-x))
__device__ __forceinline__ float ew_silu(float x) { return x / (1.f + expf(-x)); }

template <typename T>
__global__ void silu(long long n, const T* x, T* out) {
  pdl_wait();
  LAGC_FOR(i, n) { out[i] = from_f32<T>(ew_silu(to_f32(x[i]))); }
}

template <typename T>
__global__ void mul(long long n, const T* a, const T* b, T* out) {
  pdl_wait();
  LAGC_FOR(i, n) { out[i] = from_f32<T>(to_f32(a[i]) * to_f32(b[i])); }
}

template <typename T>
__global__ void add(long long n, const T* a, const T* b, T* out) {
  pdl_wait();
  LAGC_FOR(i, n) { out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i])); }
}
