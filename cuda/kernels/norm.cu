// rms_norm over the last axis: out[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)),
// as transformers' LagunaRMSNorm: float32 math, no "+1" on w. The weight w
// is float32 always (norm weights are tiny; the loader widens them). x and
// out may be different dtypes (Tx, To), e.g. an f32 residual stream feeding
// a bf16 GEMM, and may alias when they are the same buffer and dtype.

__device__ __forceinline__ float norm_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per row (short rows: per-head norms, small models). Block of
// blockDim.x threads handles blockDim.x/32 rows.
template <typename Tx, typename To>
__global__ void rms_norm_warp(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out) {
  int warps = blockDim.x >> 5;
  int r = blockIdx.x * warps + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= rows) return;  // uniform per warp
  const Tx* xr = x + (long long)r * n;
  To* orow = out + (long long)r * n;
  float ss = 0.f;
  for (int c = lane; c < n; c += 32) {
    float v = to_f32(xr[c]);
    ss += v * v;
  }
  ss = norm_warp_sum(ss);  // also orders every read of the row before the writes
  float inv = 1.f / sqrtf(ss / (float)n + eps);
  for (int c = lane; c < n; c += 32) orow[c] = from_f32<To>(w[c] * (to_f32(xr[c]) * inv));
}

// One block per row (long rows: the hidden state).
template <typename Tx, typename To>
__global__ void rms_norm_block(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out) {
  __shared__ float red[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const Tx* xr = x + (long long)r * n;
  To* orow = out + (long long)r * n;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  float ss = 0.f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    float v = to_f32(xr[c]);
    ss += v * v;
  }
  ss = norm_warp_sum(ss);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float v = lane < nwarps ? red[lane] : 0.f;
    v = norm_warp_sum(v);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  float inv = 1.f / sqrtf(red[0] / (float)n + eps);
  for (int c = threadIdx.x; c < n; c += blockDim.x) orow[c] = from_f32<To>(w[c] * (to_f32(xr[c]) * inv));
}
