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
// A warp rotates one (token, head) at a time; the head's d values are
// staged in shared memory (blockDim.x/32 * d floats, after the token's
// rot cosines and sines) so a lane can read its rotation partner.

__device__ __forceinline__ float rope_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// rope_load4 / rope_store4: 4 consecutive values at p, aligned to 4 values
// (one 16-byte access for f32, 8 bytes for the 16-bit types).
__device__ __forceinline__ void rope_load4(const float* p, float* o) {
  float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
}
template <typename T> __device__ __forceinline__ void rope_load4(const T* p, float* o) {
  uint2 u = *reinterpret_cast<const uint2*>(p);
  T a[4];
  a[0].bits = (unsigned short)(u.x & 0xffffu), a[1].bits = (unsigned short)(u.x >> 16);
  a[2].bits = (unsigned short)(u.y & 0xffffu), a[3].bits = (unsigned short)(u.y >> 16);
#pragma unroll
  for (int e = 0; e < 4; e++) o[e] = to_f32(a[e]);
}
__device__ __forceinline__ void rope_store4(float* p, const float* v) {
  float4 f;
  f.x = v[0], f.y = v[1], f.z = v[2], f.w = v[3];
  *reinterpret_cast<float4*>(p) = f;
}
template <typename T> __device__ __forceinline__ void rope_store4(T* p, const float* v) {
  T a[4];
#pragma unroll
  for (int e = 0; e < 4; e++) a[e] = from_f32<T>(v[e]);
  uint2 u;
  u.x = (unsigned int)a[0].bits | ((unsigned int)a[1].bits << 16);
  u.y = (unsigned int)a[2].bits | ((unsigned int)a[3].bits << 16);
  *reinterpret_cast<uint2*>(p) = u;
}

// rope_cos_sin is the cosine and sine of channel pair i at position fp,
// times attn.
__device__ __forceinline__ void rope_cos_sin(int i, float fp, const float* __restrict__ inv_freq, float attn, float& co,
                                             float& s) {
  sincosf(fp * inv_freq[i], &s, &co);
  s *= attn;
  co *= attn;
}
// rope_rotate is channel c < rot of the head staged in b rotated by its
// pair's co and s (the one expression both ways of getting them share).
__device__ __forceinline__ float rope_rotate(const float* b, int c, int half, float co, float s) {
  return c < half ? b[c] * co - b[c + half] * s : b[c] * co + b[c - half] * s;
}
// rope_channel is channel c of the rotated head staged (normalised) in b.
__device__ __forceinline__ float rope_channel(const float* b, int c, int rot, float fp,
                                              const float* __restrict__ inv_freq, float attn) {
  if (c >= rot) return b[c];
  int half = rot >> 1;
  float s, co;
  rope_cos_sin(c < half ? c : c - half, fp, inv_freq, attn, co, s);
  return rope_rotate(b, c, half, co, s);
}

// rope_stage stages one head of xr in b, normalised (w non-null), STEP
// channels per lane at a time (4: vector loads), and __syncwarp()s so any
// lane may read any channel (rope_channel reads the rotation partner).
// rope_head and the decode attention's fused q and k (attention.cu) both
// stage through it, so their sums run in the same order.
template <int STEP, typename T>
__device__ __forceinline__ void rope_stage(int d, const T* xr, float* b, const float* __restrict__ w, float eps) {
  int lane = threadIdx.x & 31;
  float ss = 0.f;
  for (int c = lane * STEP; c < d; c += 32 * STEP) {
    float v[STEP];
    if constexpr (STEP == 4) {
      rope_load4(xr + c, v);
    } else {
      v[0] = to_f32(xr[c]);
    }
#pragma unroll
    for (int e = 0; e < STEP; e++) {
      b[c + e] = v[e];
      ss += v[e] * v[e];
    }
  }
  if (w != nullptr) {  // uniform per warp
    ss = rope_warp_sum(ss);
    float inv = 1.f / sqrtf(ss / (float)d + eps);
    for (int c = lane * STEP; c < d; c += 32 * STEP)
#pragma unroll
      for (int e = 0; e < STEP; e++) b[c + e] = w[c + e] * (b[c + e] * inv);
  }
  __syncwarp();
}

// rope_head normalises (w non-null) and rotates one head, STEP channels
// per lane at a time (4: vector loads and stores), with its token's
// cosines and sines (times attn) from cs and sn. A lane stages, scales and
// stores the same channels; the staging is done before any partner read
// (rope_stage), so out may alias x.
template <int STEP, typename T>
__device__ __forceinline__ void rope_head(int d, const T* xr, T* orow, float* b, const float* __restrict__ w,
                                          float eps, const float* cs, const float* sn, int rot) {
  int lane = threadIdx.x & 31, half = rot >> 1;
  rope_stage<STEP, T>(d, xr, b, w, eps);
  for (int c = lane * STEP; c < d; c += 32 * STEP) {
    float y[STEP];
#pragma unroll
    for (int e = 0; e < STEP; e++) {
      const int ce = c + e, i = ce < half ? ce : ce - half;
      y[e] = ce < rot ? rope_rotate(b, ce, half, cs[i], sn[i]) : b[ce];
    }
    if constexpr (STEP == 4) {
      rope_store4(orow + c, y);
    } else {
      orow[c] = from_f32<T>(y[0]);
    }
  }
}

// nr_fast says whether qk_norm_rope's 16-threads-a-head path applies:
// head_dim 128 of 2-byte values in 16-byte aligned rows, at most
// blockDim.x/16 heads a block, and rot/2 a multiple of 8 channels whose
// number of 8-channel chunks is a power of two (so a chunk's rotation
// partner is a lane xor away).
template <typename T>
__device__ __forceinline__ bool nr_fast(int d, int per, int rot, long long ldx, long long ldo, const T* x, const T* out) {
  const int hq = rot >> 4;
  return sizeof(T) == 2 && d == 128 && per <= (int)(blockDim.x >> 4) && (rot & 15) == 0 && (hq & (hq - 1)) == 0 &&
         (ldx & 7) == 0 && (ldo & 7) == 0 && ((((unsigned long long)x) | ((unsigned long long)out)) & 15) == 0;
}

// nr_head128 normalises (w non-null) and rotates 8 channels c0..c0+7 of a
// head (raw: their 16 bytes) held by this thread, 16 threads a head, and
// stores them at o. The square sums run in rope_stage's order (lanes of
// 4 channels, then its butterfly: here each thread's two halves, xor 8..1
// over threads, then the halves) and the rotation is rope_rotate's
// expression, so the bits are qk_norm_rope's one-warp path's and the
// decode attention's fused staging's. Every lane of the warp calls it
// (the shuffles); store is false where the thread has no head.
template <typename T>
__device__ __forceinline__ void nr_head128(uint4 raw, int c0, T* o, bool store, const float* __restrict__ w, float eps,
                                           const float* cs, const float* sn, int rot) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
  float v[8];
#pragma unroll
  for (int e = 0; e < 4; e++) {
    T a, b;
    a.bits = (unsigned short)(words[e] & 0xffffu), b.bits = (unsigned short)(words[e] >> 16);
    v[2 * e] = to_f32(a), v[2 * e + 1] = to_f32(b);
  }
  // The sums on every lane (a warp's halves may differ in w: q and k).
  float sa = 0.f, sb = 0.f;
#pragma unroll
  for (int e = 0; e < 4; e++) sa += v[e] * v[e];
#pragma unroll
  for (int e = 4; e < 8; e++) sb += v[e] * v[e];
#pragma unroll
  for (int m = 8; m > 0; m >>= 1) {
    sa += __shfl_xor_sync(0xffffffffu, sa, m);
    sb += __shfl_xor_sync(0xffffffffu, sb, m);
  }
  if (w != nullptr) {
    const float inv = 1.f / sqrtf((sa + sb) / 128.f + eps);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = w[c0 + e] * (v[e] * inv);
  }
  const int half = rot >> 1;
  float p[8];
#pragma unroll
  for (int e = 0; e < 8; e++) p[e] = __shfl_xor_sync(0xffffffffu, v[e], half >> 3);
  if (!store) return;
  unsigned out[4];
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    float y[2];
#pragma unroll
    for (int f = 0; f < 2; f++) {
      const int c = c0 + e + f, i = c < half ? c : c - half;
      y[f] = c >= rot ? v[e + f] : c < half ? v[e + f] * cs[i] - p[e + f] * sn[i] : v[e + f] * cs[i] + p[e + f] * sn[i];
    }
    const T lo = from_f32<T>(y[0]), hi = from_f32<T>(y[1]);
    out[e >> 1] = (unsigned)lo.bits | ((unsigned)hi.bits << 16);
  }
  *reinterpret_cast<uint4*>(o) = make_uint4(out[0], out[1], out[2], out[3]);
}

// A block takes one token and a group of its heads (gridDim.x is ntok
// times the groups; a token's heads split evenly), one warp a head at a
// time. The token's rot/2 cosines and sines are computed once a block into
// shared memory (rot floats, then each warp's d staged channels): with a
// warp a (token, head) and each channel its own sincosf, the 2048-token
// prefill's q heads took 104 us on the H200.
// Vector path where d and both row strides are multiples of 4 and x, out
// are aligned to 4 values (the executor's buffers are); else one channel
// per lane at a time.
template <typename T>
__global__ void qk_norm_rope(int ntok, int nh1, int nh2, int d, long long ldx, long long ldo,
                             const T* x, T* out, const float* __restrict__ w1,
                             const float* __restrict__ w2, float eps, const int* __restrict__ pos,
                             const float* __restrict__ inv_freq, int rot, float attn) {
  pdl_wait();
  extern __shared__ float rope_buf[];
  const int warps = blockDim.x >> 5, wi = threadIdx.x >> 5, half = rot >> 1;
  const int nh = nh1 + nh2, groups = gridDim.x / ntok;
  const int t = blockIdx.x / groups, g = blockIdx.x - t * groups;
  const int per = (nh + groups - 1) / groups, h1 = min(nh, (g + 1) * per);
  float* cs = rope_buf;
  float* sn = rope_buf + half;
  float* b = rope_buf + rot + wi * d;
  const float fp = (float)pos[t];
  // 16 threads a head: every head of the group loaded at once, before the
  // table (the one-warp path has a warp's one head in flight at a time:
  // 0.9 TB/s on the H200 for a 2048-token chunk's q heads).
  const bool fast = nr_fast(d, per, rot, ldx, ldo, x, out);
  const int fh = g * per + (threadIdx.x >> 4), fc = (threadIdx.x & 15) * 8;
  const bool fown = fast && (int)(threadIdx.x >> 4) < per && fh < h1;
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (fown) raw = *reinterpret_cast<const uint4*>(x + t * ldx + (long long)fh * d + fc);
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(i, fp, inv_freq, attn, cs[i], sn[i]);
  __syncthreads();
  if constexpr (sizeof(T) == 2) {
    if (fast) {
      nr_head128<T>(raw, fc, out + t * ldo + (long long)fh * d + fc, fown, fh < nh1 ? w1 : w2, eps, cs, sn, rot);
      return;
    }
  }
  const unsigned long long amask = 4 * sizeof(T) - 1;
  const bool v4 = (d & 3) == 0 && (ldx & 3) == 0 && (ldo & 3) == 0 &&
                  ((((unsigned long long)x) | ((unsigned long long)out)) & amask) == 0;
  for (int h = g * per + wi; h < h1; h += warps) {  // uniform per warp
    const T* xr = x + t * ldx + (long long)h * d;
    T* orow = out + t * ldo + (long long)h * d;
    const float* w = h < nh1 ? w1 : w2;
    if (v4)
      rope_head<4, T>(d, xr, orow, b, w, eps, cs, sn, rot);
    else
      rope_head<1, T>(d, xr, orow, b, w, eps, cs, sn, rot);
    __syncwarp();  // b is staged again for the next head
  }
}
