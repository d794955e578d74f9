// Element-wise kernels for the CUDA layer's tests: conversions and
// sequences to check numerics and the compile cache with.

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

// swiglu: out[r, c] = silu(a[r, c]) * b[r, c] for out [rows, n]; a and b
// rows are ld elements apart (a fused gate|up output [rows, 2n] passes a =
// base, b = base + n, ld = 2n). The plan fuses swiglu into the GEMM
// epilogue; the tests check this composition against exec/cpu.
template <typename T>
__global__ void swiglu(int rows, int n, const T* a, const T* b, long long ld, T* out) {
  long long total = (long long)rows * n;
  LAGC_FOR(i, total) {
    long long r = i / n, c = i - r * n;
    float x = to_f32(a[r * ld + c]);
    out[i] = from_f32<T>(x / (1.f + expf(-x)) * to_f32(b[r * ld + c]));
  }
}
