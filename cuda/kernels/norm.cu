// rms_norm over the last axis: out[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)),
// as transformers' LagunaRMSNorm: float32 math, no "+1" on w. The weight w
// is float32 always (norm weights are tiny; the loader widens them). x and
// out may be different dtypes (Tx, To), e.g. an f32 residual stream feeding
// a bf16 GEMM, and may alias when they are the same buffer and dtype.
//
// Where n is a multiple of 8 and x, w and out are 16-byte aligned (the
// executor's arena and weights always are), a thread loads chunks of 8
// values with 16-byte loads, keeps them in registers for the second pass
// (NORM_CHUNKS per thread at most), and stores 8 at a time; otherwise it
// goes element by element and reads x twice. A thread writes only the
// elements it read, so out may alias x either way.

#define NORM_CHUNKS 4

__device__ __forceinline__ float norm_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void norm_bf16x2(unsigned int u, float* o) {
  o[0] = __uint_as_float(u << 16);  // the element at the lower address
  o[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ unsigned int norm_pack(bf16_t a, bf16_t b) { return (unsigned int)a.bits | ((unsigned int)b.bits << 16); }
__device__ __forceinline__ unsigned int norm_pack(half_t a, half_t b) { return (unsigned int)a.bits | ((unsigned int)b.bits << 16); }

// norm_load8 / norm_store8: 8 consecutive values at a 16-byte aligned p.
__device__ __forceinline__ void norm_load8(const float* p, float* o) {
  float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
__device__ __forceinline__ void norm_load8(const bf16_t* p, float* o) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  norm_bf16x2(u.x, o);
  norm_bf16x2(u.y, o + 2);
  norm_bf16x2(u.z, o + 4);
  norm_bf16x2(u.w, o + 6);
}
__device__ __forceinline__ void norm_load8(const half_t* p, float* o) {
#pragma unroll
  for (int e = 0; e < 8; e++) o[e] = to_f32(p[e]);
}
__device__ __forceinline__ void norm_store8(float* p, const float* v) {
  float4 a, b;
  a.x = v[0], a.y = v[1], a.z = v[2], a.w = v[3], b.x = v[4], b.y = v[5], b.z = v[6], b.w = v[7];
  reinterpret_cast<float4*>(p)[0] = a;
  reinterpret_cast<float4*>(p)[1] = b;
}
template <typename T> __device__ __forceinline__ void norm_store8_16(T* p, const float* v) {
  uint4 u;
  u.x = norm_pack(from_f32<T>(v[0]), from_f32<T>(v[1]));
  u.y = norm_pack(from_f32<T>(v[2]), from_f32<T>(v[3]));
  u.z = norm_pack(from_f32<T>(v[4]), from_f32<T>(v[5]));
  u.w = norm_pack(from_f32<T>(v[6]), from_f32<T>(v[7]));
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void norm_store8(bf16_t* p, const float* v) { norm_store8_16(p, v); }
__device__ __forceinline__ void norm_store8(half_t* p, const float* v) { norm_store8_16(p, v); }

__device__ __forceinline__ bool norm_aligned(const void* a, const void* b, const void* c) {
  return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15ull) == 0;
}

// norm_row normalises one row with `lanes` threads (a warp, or a block
// whose warps combine through red) of which this is thread `me`.
template <typename Tx, typename To, bool BLOCK>
__device__ __forceinline__ void norm_row(int n, float eps, const Tx* xr, const float* __restrict__ w, To* orow, int me,
                                         int lanes, float* red) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int nc = n >> 3;
  bool vec = (n & 7) == 0 && nc <= NORM_CHUNKS * lanes && norm_aligned(xr, w, orow);
  float v[NORM_CHUNKS][8];
  float ss = 0.f;
  if (vec) {
#pragma unroll
    for (int i = 0; i < NORM_CHUNKS; i++) {
      int c = me + i * lanes;
      if (c < nc) {
        norm_load8(xr + 8 * c, v[i]);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += v[i][e] * v[i][e];
      }
    }
  } else {
    for (int c = me; c < n; c += lanes) {
      float x = to_f32(xr[c]);
      ss += x * x;
    }
  }
  ss = norm_warp_sum(ss);  // also orders every read of the row before the writes
  if (BLOCK) {
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    ss = norm_warp_sum(lane < (lanes >> 5) ? red[lane] : 0.f);  // each warp sums the warps' sums
  }
  float inv = 1.f / sqrtf(ss / (float)n + eps);
  if (vec) {
#pragma unroll
    for (int i = 0; i < NORM_CHUNKS; i++) {
      int c = me + i * lanes;
      if (c < nc) {
        float wv[8], o[8];
        norm_load8(w + 8 * c, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = wv[e] * (v[i][e] * inv);
        norm_store8(orow + 8 * c, o);
      }
    }
  } else {
    for (int c = me; c < n; c += lanes) orow[c] = from_f32<To>(w[c] * (to_f32(xr[c]) * inv));
  }
}

// One warp per row (short rows: per-head norms, small models). Block of
// blockDim.x threads handles blockDim.x/32 rows.
template <typename Tx, typename To>
__global__ void rms_norm_warp(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out) {
  int warps = blockDim.x >> 5;
  int r = blockIdx.x * warps + (threadIdx.x >> 5);
  if (r >= rows) return;  // uniform per warp
  norm_row<Tx, To, false>(n, eps, x + (long long)r * n, w, out + (long long)r * n, threadIdx.x & 31, 32, nullptr);
}

// One block per row (long rows: the hidden state; for one token, a single
// block whose threads each hold a 16-byte chunk).
template <typename Tx, typename To>
__global__ void rms_norm_block(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out) {
  __shared__ float red[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  norm_row<Tx, To, true>(n, eps, x + (long long)r * n, w, out + (long long)r * n, threadIdx.x, blockDim.x, red);
}
