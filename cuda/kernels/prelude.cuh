// lagc kernel prelude: put in front of every kernel source by cuda.Compile.
// It needs no CUDA headers (NVRTC finds none by default), so the 16-bit
// float types and their conversions are spelled out here with PTX.
// Kernels load and store through to_f32/from_f32<T> and compute in float.

struct half_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

// Built-in arithmetic types convert with a C++ cast (integers from float
// round toward zero); the 16-bit float types have their own overloads.
template <typename T> __device__ __forceinline__ float to_f32(T x) { return (float)x; }
__device__ __forceinline__ float to_f32(half_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_f32(bf16_t x) {
  return __uint_as_float(((unsigned int)x.bits) << 16);
}

template <typename T> __device__ __forceinline__ T from_f32(float x) { return (T)x; }
template <> __device__ __forceinline__ half_t from_f32<half_t>(float x) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}

// Grid-stride loop over n elements.
#define LAGC_FOR(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)
