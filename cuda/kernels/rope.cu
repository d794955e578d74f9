// Rotary position embedding (NeoX rotate-half) on the first `rot` channels
// of every head, optionally fused with the per-head q/k RMS norm that comes
// before it in Laguna. Positions are read from device memory, pos[t] for
// token t (decode: a single int the graph's step updates), so one captured
// graph serves every step.
//
// The angle of channel pair i at position p is float(p) * inv_freq[i] in
// float32, inv_freq computed on the host exactly as transformers does
// (default or YaRN); cos and sin are multiplied by attn (YaRN's attention
// factor, 1 otherwise). Channel i < rot/2 pairs with i + rot/2; channels
// from rot on pass through.
//
// Heads: token t's row starts at x + t*ldx and holds nh1 + nh2 heads of d
// channels back to back (the q heads then the k heads of a fused QKV row).
// Heads below nh1 are normalised with w1, the others with w2; a null weight
// means no norm (plain rope). out may alias x (in place, ldo == ldx).
//
// One warp per (token, head); the head's d values are staged in shared
// memory (blockDim.x/32 * d floats) so a lane can read its rotation partner.

__device__ __forceinline__ float rope_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void qk_norm_rope(int ntok, int nh1, int nh2, int d, long long ldx, long long ldo,
                             const T* x, T* out, const float* __restrict__ w1,
                             const float* __restrict__ w2, float eps, const int* __restrict__ pos,
                             const float* __restrict__ inv_freq, int rot, float attn) {
  extern __shared__ float rope_buf[];
  int warps = blockDim.x >> 5, wi = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int nh = nh1 + nh2;
  long long item = (long long)blockIdx.x * warps + wi;
  if (item >= (long long)ntok * nh) return;  // uniform per warp
  int t = (int)(item / nh), h = (int)(item % nh);
  const T* xr = x + t * ldx + (long long)h * d;
  T* orow = out + t * ldo + (long long)h * d;
  float* b = rope_buf + wi * d;
  const float* w = h < nh1 ? w1 : w2;

  float ss = 0.f;
  for (int c = lane; c < d; c += 32) {
    float v = to_f32(xr[c]);
    b[c] = v;
    ss += v * v;
  }
  if (w != nullptr) {  // uniform per warp
    ss = rope_warp_sum(ss);
    float inv = 1.f / sqrtf(ss / (float)d + eps);
    for (int c = lane; c < d; c += 32) b[c] = w[c] * (b[c] * inv);
  }
  __syncwarp();

  float fp = (float)pos[t];
  int half = rot >> 1;
  for (int c = lane; c < d; c += 32) {
    float y = b[c];
    if (c < rot) {
      int i = c < half ? c : c - half;
      float s, co;
      sincosf(fp * inv_freq[i], &s, &co);
      s *= attn;
      co *= attn;
      y = c < half ? b[c] * co - b[c + half] * s : b[c] * co + b[c - half] * s;
    }
    orow[c] = from_f32<T>(y);
  }
}
