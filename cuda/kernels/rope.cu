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
// Outside qk_norm_rope's fast path (FAST), a warp rotates one (token,
// head) at a time; the head's d values are staged in shared memory (d
// floats a warp) so a lane can read its rotation partner.

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
// rope_pair is channel value a rotated with its partner's value b: a*co -
// b*s in the first half, a*co + b*s in the second. Both products are
// rounded, then summed: with nvcc's default contraction each call site
// chose its own fused multiply-add, and qk_norm_rope's fast path
// (nr_head128) differed from the one-warp path and the decode attention's
// fused rotation by an ulp of T, so a batched step (the fast path) and the
// decode schedule (the attention's rotation) gave a row other bits on
// S-2.1's 128-channel heads (TestBatchStepS21GPU). Every rotation that
// must agree bit for bit calls this.
__device__ __forceinline__ float rope_pair(float a, float b, float co, float s, bool first) {
  const float x = __fmul_rn(a, co), y = __fmul_rn(b, s);
  return first ? __fsub_rn(x, y) : __fadd_rn(x, y);
}
// rope_sq_add is ss + v*v with one rounding (an explicit fused
// multiply-add), the square sums' step in rope_stage and nr_head128 alike.
__device__ __forceinline__ float rope_sq_add(float ss, float v) { return __fmaf_rn(v, v, ss); }
// rope_inv_rms is 1/sqrt(ss/d + eps), each step rounded once, spelled out
// for the same reason.
__device__ __forceinline__ float rope_inv_rms(float ss, float d, float eps) {
  return __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(ss, d), eps)));
}
// rope_rotate is channel c < rot of the head staged in b rotated by its
// pair's co and s (the one expression both ways of getting them share).
__device__ __forceinline__ float rope_rotate(const float* b, int c, int half, float co, float s) {
  return c < half ? rope_pair(b[c], b[c + half], co, s, true) : rope_pair(b[c], b[c - half], co, s, false);
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
      ss = rope_sq_add(ss, v[e]);
    }
  }
  if (w != nullptr) {  // uniform per warp
    ss = rope_warp_sum(ss);
    const float inv = rope_inv_rms(ss, (float)d, eps);
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

// NR_ITEMS is the most (token, head) items a 16-thread slot of
// qk_norm_rope's fast path takes: one 16-byte register each, all loaded
// before any is used (8 in 64 registers: four blocks of 256 threads an SM).
#define NR_ITEMS 8

// nr_head128 normalises (w non-null) and rotates 8 channels c0..c0+7 of a
// head (raw: their 16 bytes) held by this thread, 16 threads a head, and
// stores them at o. The square sums run in rope_stage's order (lanes of
// 4 channels, then its butterfly: here each thread's two halves, xor 8..1
// over threads, then the halves) and the rotation is rope_rotate's
// expression, and every rounding step is rope_pair's, rope_sq_add's and
// rope_inv_rms's, so its bits are the one-warp path's (TestNormRoPEItemsGPU;
// before they were pinned, nvcc's own contractions made some outputs
// differ by one ulp of T). Every lane of the warp calls it (the shuffles);
// store is false where the thread has no head.
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
  for (int e = 0; e < 4; e++) sa = rope_sq_add(sa, v[e]);
#pragma unroll
  for (int e = 4; e < 8; e++) sb = rope_sq_add(sb, v[e]);
#pragma unroll
  for (int m = 8; m > 0; m >>= 1) {
    sa += __shfl_xor_sync(0xffffffffu, sa, m);
    sb += __shfl_xor_sync(0xffffffffu, sb, m);
  }
  if (w != nullptr) {
    const float inv = rope_inv_rms(sa + sb, 128.f, eps);
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
      y[f] = c >= rot ? v[e + f] : rope_pair(v[e + f], p[e + f], cs[i], sn[i], c < half);
    }
    const T lo = from_f32<T>(y[0]), hi = from_f32<T>(y[1]);
    out[e >> 1] = (unsigned)lo.bits | ((unsigned)hi.bits << 16);
  }
  // One 16-byte store (a uint4 store through o compiles to four 4-byte ones).
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(o), "r"(out[0]), "r"(out[1]), "r"(out[2]), "r"(out[3])
               : "memory");
}

// rope_tables computes the cosines then the sines (times attn) of
// tokens t0..t0+ntab-1 into tab, rot floats a token, with the whole block;
// a null pos means token t is at position t.
__device__ __forceinline__ void rope_tables(float* tab, int ntab, int t0, int rot, const int* __restrict__ pos,
                                            const float* __restrict__ inv_freq, float attn) {
  const int half = rot >> 1;
  for (int i = threadIdx.x; i < ntab * half; i += blockDim.x) {
    const int tt = i / half, c = i - tt * half;
    rope_cos_sin(c, (float)(pos ? pos[t0 + tt] : t0 + tt), inv_freq, attn, tab[tt * rot + c], tab[tt * rot + half + c]);
  }
}

// rope_cs_table writes the cosine and sine (times attn) of every channel
// pair i of tokens 0..ntok-1 to tab in device memory, rot floats a token,
// pair i's two at 2i and 2i + 1 (rope_cos_sin's values, interleaved so
// that a thread holding pairs i and i + 1 reads them in one 16-byte load),
// one thread a (token, pair): for gemm_wgmma_nr, whose tiles hold one or
// two heads of 128 tokens each and so could not share a sincosf between a
// token's heads (computed per head, it made that GEMM 16% slower than the
// GEMM alone; docs/PERF.md).
__global__ void __launch_bounds__(256) rope_cs_table(int ntok, const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                                     int rot, float attn, float* __restrict__ tab) {
  pdl_wait();
  const int half = rot >> 1;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)ntok * half;
       i += (long long)gridDim.x * blockDim.x) {
    const int t = (int)(i / half), c = (int)(i - (long long)t * half);
    rope_cos_sin(c, (float)(pos ? pos[t] : t), inv_freq, attn, tab[(long long)t * rot + 2 * c], tab[(long long)t * rot + 2 * c + 1]);
  }
}

// The (token, head) items, token-major, go to blocks per at a time
// (gridDim.x = ceil(ntok*(nh1+nh2)/per)); a block computes the rope table
// of each token its items touch once, into shared memory (with a warp a
// (token, head) and a sincosf per channel, the 2048-token prefill's q
// heads took 104 us on the H200). Shared memory: each warp's d staged
// channels (FAST = 0 only), then rot floats a token.
//
// FAST (lower.normRoPEFast: head_dim 128 of 2-byte values in 16-byte
// aligned rows, rot/2 a multiple of 8 channels whose number of 8-channel
// chunks is a power of two, so a chunk's rotation partner is a lane xor
// away; per at most NR_ITEMS a slot): 16 threads a head, slot s of the
// block taking items s, s + slots, ..., a thread's 16-byte loads all
// issued before the table and before any is used (with one load a thread
// and a block a token's group of heads, the 2048-token q heads ran at 1.7
// TB/s on the H200). Else a warp an item at a time (rope_head): vectors
// where d and both row strides are multiples of 4 and x, out are aligned
// to 4 values, else one channel per lane. Two instantiations, so the
// one-warp path's registers do not limit the fast one's blocks an SM;
// lower launches 256 threads.
template <typename T, int FAST>
__global__ void __launch_bounds__(256, FAST ? 4 : 1)
    qk_norm_rope(int ntok, int nh1, int nh2, int d, long long ldx, long long ldo, const T* x, T* out,
                 const float* __restrict__ w1, const float* __restrict__ w2, float eps, const int* __restrict__ pos,
                 const float* __restrict__ inv_freq, int rot, float attn, int per) {
  pdl_wait();
  extern __shared__ float rope_buf[];
  const int half = rot >> 1, nh = nh1 + nh2, i0 = blockIdx.x * per, n = min(per, ntok * nh - i0);
  const int t0 = i0 / nh, h0 = i0 - t0 * nh, ntab = (h0 + n - 1) / nh + 1;  // the block's tokens
  if constexpr (FAST) {
    static_assert(sizeof(T) == 2, "qk_norm_rope's fast path is for 2-byte values");
    // Item s + k*slots is token t0 + tt, head h: stepped (dq tokens and dr
    // heads a slot) rather than divided each time.
    const int slots = blockDim.x >> 4, s = threadIdx.x >> 4, fc = (threadIdx.x & 15) * 8;
    const int dq = slots / nh, dr = slots - dq * nh, tt0 = (h0 + s) / nh, hs = h0 + s - tt0 * nh;
    uint4 raw[NR_ITEMS];
    int tt = tt0, h = hs;
#pragma unroll
    for (int k = 0; k < NR_ITEMS; k++) {
      raw[k] = make_uint4(0, 0, 0, 0);
      if (s + k * slots < n) raw[k] = *reinterpret_cast<const uint4*>(x + (t0 + tt) * ldx + (long long)h * d + fc);
      h += dr, tt += dq;
      if (h >= nh) h -= nh, tt++;
    }
    rope_tables(rope_buf, ntab, t0, rot, pos, inv_freq, attn);
    __syncthreads();
    // Stepped again from values the compiler cannot see are the loads'
    // (it would keep each item's from there: 8 bytes of spill at 64).
    tt = tt0, h = hs;
    asm volatile("" : "+r"(tt), "+r"(h));
#pragma unroll
    for (int k = 0; k < NR_ITEMS; k++) {
      if (k * slots >= n) break;  // uniform: every lane calls nr_head128 (it shuffles)
      const float* cs = rope_buf + tt * rot;
      nr_head128<T>(raw[k], fc, out + (t0 + tt) * ldo + (long long)h * d + fc, s + k * slots < n, h < nh1 ? w1 : w2, eps,
                    cs, cs + half, rot);
      h += dr, tt += dq;
      if (h >= nh) h -= nh, tt++;
    }
  } else {
    const int warps = blockDim.x >> 5, wi = threadIdx.x >> 5;
    float* tab = rope_buf + warps * d;
    rope_tables(tab, ntab, t0, rot, pos, inv_freq, attn);
    __syncthreads();
    float* b = rope_buf + wi * d;
    const unsigned long long amask = 4 * sizeof(T) - 1;
    const bool v4 = (d & 3) == 0 && (ldx & 3) == 0 && (ldo & 3) == 0 &&
                    ((((unsigned long long)x) | ((unsigned long long)out)) & amask) == 0;
    for (int j = h0 + wi; j < h0 + n; j += warps) {  // uniform per warp
      const int tt = j / nh, h = j - tt * nh;
      const T* xr = x + (t0 + tt) * ldx + (long long)h * d;
      T* orow = out + (t0 + tt) * ldo + (long long)h * d;
      const float* cs = tab + tt * rot;
      if (v4)
        rope_head<4, T>(d, xr, orow, b, h < nh1 ? w1 : w2, eps, cs, cs + half, rot);
      else
        rope_head<1, T>(d, xr, orow, b, h < nh1 ? w1 : w2, eps, cs, cs + half, rot);
      __syncwarp();  // b is staged again for the next head
    }
  }
}
