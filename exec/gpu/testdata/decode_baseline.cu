// The decode kernels as they were before the decode tuning, and argmax as
// it was before it split rows over blocks: BenchmarkDecodeKernels
// (decode_bench_test.go, -tags decodebaseline) times them against the
// current ones. Not used by the executor.

// MoE router: for each token's expert logits (float32 normally), optionally
// soft-capped (softcap > 0: c*tanh(l/c)), s = sigmoid(l); the top k experts
// by s + bias (bias only chooses; null: none) are chosen, best first, and
// weighted s / sum(chosen s) * scaling. One block per token.
//
// Exactly as exec/cpu.RouterTopK computes it, so the same experts are
// chosen: tanh and the sigmoid in double rounded once to float (as the
// reference does), ties to the lower expert index, NaN above every number,
// the sum in selection order.
//
// Dynamic shared memory: 2*E floats (score, selection key), k ints,
// E bytes (taken flags).

// greater orders floats with NaN above every number and equal to itself.
__device__ __forceinline__ bool rt_greater(float a, float b) {
  if (a != a) return b == b;
  return a > b;
}

// better: does candidate (a, ia) beat (b, ib)? ib < 0 is no candidate.
__device__ __forceinline__ bool rt_better(float a, int ia, float b, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (rt_greater(a, b)) return true;
  if (rt_greater(b, a)) return false;
  return ia < ib;
}

template <typename T>
__global__ void router_topk(int ntok, int E, int k, float softcap, float scaling, const T* __restrict__ logits,
                            long long ld, const float* __restrict__ bias, float* __restrict__ weights,
                            int* __restrict__ ids) {
  extern __shared__ float rt_smem[];
  __shared__ float wv[32];
  __shared__ int wi[32];
  float* score = rt_smem;
  float* sel = score + E;
  int* chosen = (int*)(sel + E);
  unsigned char* taken = (unsigned char*)(chosen + k);
  int t = blockIdx.x;
  if (t >= ntok) return;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;

  for (int e = tid; e < E; e += blockDim.x) {
    float l = to_f32(logits[t * ld + e]);
    if (softcap > 0.f) l = (float)tanh((double)(l / softcap)) * softcap;
    float s = (float)(1.0 / (1.0 + exp(-(double)l)));
    score[e] = s;
    sel[e] = bias != nullptr ? s + bias[e] : s;
    taken[e] = 0;
  }
  __syncthreads();

  for (int j = 0; j < k; j++) {
    float bv = 0.f;
    int bi = -1;
    for (int e = tid; e < E; e += blockDim.x) {
      if (!taken[e] && rt_better(sel[e], e, bv, bi)) {
        bv = sel[e];
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (rt_better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      wv[warp] = bv;
      wi[warp] = bi;
    }
    __syncthreads();
    if (tid == 0) {
      float v = wv[0];
      int i = wi[0];
      for (int w = 1; w < nwarps; w++) {
        if (rt_better(wv[w], wi[w], v, i)) {
          v = wv[w];
          i = wi[w];
        }
      }
      chosen[j] = i;
      taken[i] = 1;
    }
    __syncthreads();
  }

  if (tid == 0) {
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += score[chosen[j]];
    for (int j = 0; j < k; j++) {
      weights[(long long)t * k + j] = score[chosen[j]] / sum * scaling;
      ids[(long long)t * k + j] = chosen[j];
    }
  }
}

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

// Causal grouped-query attention over the KV cache (layout in kvcache.cu:
// K and V [slots, nkv, d], position p in slot p, or p % window for a ring).
// Query head h uses kv head h / (nh/nkv). Scores q.k*scale and the softmax
// are float32 (online softmax, flash style). A sliding layer's query at
// position p sees keys j with p-window < j <= p; a full layer's, j <= p.

#define ATT_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float att_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float att_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ int att_slot(int j, int window) { return window > 0 ? j % window : j; }

// ---------------------------------------------------------------------------
// Decode (one token). The cache already holds this step's k, v (appended
// before, at pos). The position is read from device memory, so the number
// of valid keys is too; the grid is fixed (nsplit, nkv) so one captured
// graph serves every step. The visible keys are split evenly over nsplit
// blocks per kv head (flash-decoding); a block handles the group of query
// heads of its kv head, so each key is read once. With nsplit == 1 the
// block writes the output directly; otherwise it writes its unnormalised
// partial (acc, max, sum) to the workspace and attn_decode_combine merges.
//
// Per tile of DEC_TILE keys: K and V are staged in shared memory as float
// with coalesced loads; scores take DEC_THREADS/DEC_TILE threads per key
// (each a share of the group's heads); the output accumulates with a
// thread per channel holding up to 8 heads in registers.
//
// Dynamic shared memory, floats: q and acc [group][d] each, scores
// [group][DEC_TILE], max, sum and rescale [group], K [DEC_TILE][d+1],
// V [DEC_TILE][d].

#define DEC_TILE 32
#define DEC_THREADS 128
#define DEC_LOADS 8

template <typename T>
__global__ void __launch_bounds__(DEC_THREADS) attn_decode(int nh, int nkv, int d, int window, int slots, int nsplit,
                                                           float scale, const int* __restrict__ pos,
                                                           const T* __restrict__ q, const T* __restrict__ kc,
                                                           const T* __restrict__ vc, T* __restrict__ out,
                                                           float* __restrict__ part_acc, float* __restrict__ part_ml) {
  extern __shared__ float dec_smem[];
  int group = nh / nkv;
  int kvh = blockIdx.y, split = blockIdx.x;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  float* qs = dec_smem;                 // [group][d]
  float* acc = qs + group * d;          // [group][d]
  float* sc = acc + group * d;          // [group][DEC_TILE]
  float* mrow = sc + group * DEC_TILE;  // [group]
  float* lrow = mrow + group;           // [group]
  float* arow = lrow + group;           // [group]
  float* Ks = arow + group;             // [DEC_TILE][d+1]
  float* Vs = Ks + DEC_TILE * (d + 1);  // [DEC_TILE][d]

  int p = *pos;
  int last = p;
  if (window == 0 && last >= slots) last = slots - 1;  // guard only: the host keeps p < slots
  int first = window > 0 ? max(0, p - window + 1) : 0;
  int n = last - first + 1;
  int per = (n + nsplit - 1) / nsplit;
  int j0 = first + split * per;
  int j1 = min(j0 + per, last + 1);

  for (int i = tid; i < group * d; i += blockDim.x) {
    int g = i / d, c = i - g * d;
    qs[i] = to_f32(q[(long long)(kvh * group + g) * d + c]);
    acc[i] = 0.f;
  }
  for (int g = tid; g < group; g += blockDim.x) {
    mrow[g] = ATT_NEG_INF;
    lrow[g] = 0.f;
  }

  long long rowstride = (long long)nkv * d;
  const int kthreads = DEC_THREADS / DEC_TILE;  // threads per key in the score phase
  for (int jt = j0; jt < j1; jt += DEC_TILE) {
    int nt = min(DEC_TILE, j1 - jt);
    __syncthreads();  // the previous tile's readers are done (and q, acc are set)
    // DEC_LOADS loads of K and of V in flight per thread before any store:
    // one at a time left the loop waiting on memory latency.
    for (int base = 0; base < nt * d; base += DEC_THREADS * DEC_LOADS) {
      float kv[DEC_LOADS], vv[DEC_LOADS];
#pragma unroll
      for (int u = 0; u < DEC_LOADS; u++) {
        int i = base + u * DEC_THREADS + tid;
        kv[u] = vv[u] = 0.f;
        if (i < nt * d) {
          int kk = i / d, c = i - kk * d;
          long long off = att_slot(jt + kk, window) * rowstride + (long long)kvh * d + c;
          kv[u] = to_f32(kc[off]);
          vv[u] = to_f32(vc[off]);
        }
      }
#pragma unroll
      for (int u = 0; u < DEC_LOADS; u++) {
        int i = base + u * DEC_THREADS + tid;
        if (i < nt * d) {
          int kk = i / d, c = i - kk * d;
          Ks[kk * (d + 1) + c] = kv[u];
          Vs[kk * d + c] = vv[u];
        }
      }
    }
    __syncthreads();
    // Scores: key kk = tid % DEC_TILE, heads g = tid / DEC_TILE + kthreads*i.
    {
      int kk = tid % DEC_TILE, gp = tid / DEC_TILE;
      if (kk < nt) {
        const float* kr = Ks + kk * (d + 1);
        for (int g0 = gp; g0 < group; g0 += 8 * kthreads) {
          float a[8];
#pragma unroll
          for (int i = 0; i < 8; i++) a[i] = 0.f;
#pragma unroll 4
          for (int c = 0; c < d; c++) {
            float kv = kr[c];
#pragma unroll
            for (int i = 0; i < 8; i++) {
              int g = g0 + kthreads * i;
              if (g < group) a[i] += qs[g * d + c] * kv;
            }
          }
#pragma unroll
          for (int i = 0; i < 8; i++) {
            int g = g0 + kthreads * i;
            if (g < group) sc[g * DEC_TILE + kk] = a[i] * scale;
          }
        }
      }
    }
    __syncthreads();
    // Online softmax statistics: a warp per head.
    for (int g = warp; g < group; g += nwarps) {
      float* s = sc + g * DEC_TILE;
      float mt = lane < nt ? s[lane] : ATT_NEG_INF;  // DEC_TILE == 32: a key per lane
      mt = att_warp_max(mt);
      float mold = mrow[g];
      float mnew = fmaxf(mold, mt);
      float e = lane < nt ? expf(s[lane] - mnew) : 0.f;
      if (lane < nt) s[lane] = e;
      float sum = att_warp_sum(e);
      if (lane == 0) {
        float alpha = expf(mold - mnew);  // 0 on the first tile (mold = -inf)
        lrow[g] = lrow[g] * alpha + sum;
        mrow[g] = mnew;
        arow[g] = alpha;
      }
    }
    __syncthreads();
    // acc = acc*alpha + p.V: a thread per channel, 8 heads at a time.
    for (int c = tid; c < d; c += blockDim.x) {
      for (int g0 = 0; g0 < group; g0 += 8) {
        float a[8];
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] = g0 + i < group ? acc[(g0 + i) * d + c] * arow[g0 + i] : 0.f;
#pragma unroll 4
        for (int kk = 0; kk < nt; kk++) {
          float v = Vs[kk * d + c];
#pragma unroll
          for (int i = 0; i < 8; i++)
            if (g0 + i < group) a[i] += sc[(g0 + i) * DEC_TILE + kk] * v;
        }
#pragma unroll
        for (int i = 0; i < 8; i++)
          if (g0 + i < group) acc[(g0 + i) * d + c] = a[i];
      }
    }
  }
  __syncthreads();

  if (nsplit == 1) {
    for (int i = tid; i < group * d; i += blockDim.x) {
      int g = i / d;
      out[(long long)kvh * group * d + i] = from_f32<T>(acc[i] / lrow[g]);
    }
    return;
  }
  // Partials: part_acc [nsplit][nh][d], part_ml [nsplit][nh][2] (max, sum).
  // An empty split (short contexts) writes max -inf, sum 0, acc 0.
  for (int i = tid; i < group * d; i += blockDim.x) {
    part_acc[((long long)split * nh + kvh * group) * d + i] = acc[i];
  }
  for (int g = tid; g < group; g += blockDim.x) {
    long long o = ((long long)split * nh + kvh * group + g) * 2;
    part_ml[o] = mrow[g];
    part_ml[o + 1] = lrow[g];
  }
}

// Merges the nsplit partials of every query head: grid nh, any block size.
template <typename T>
__global__ void attn_decode_combine(int nh, int d, int nsplit, const float* __restrict__ part_acc,
                                    const float* __restrict__ part_ml, T* __restrict__ out) {
  int h = blockIdx.x;
  float M = ATT_NEG_INF;
  for (int s = 0; s < nsplit; s++) {
    long long o = ((long long)s * nh + h) * 2;
    if (part_ml[o + 1] > 0.f) M = fmaxf(M, part_ml[o]);
  }
  float den = 0.f;
  for (int s = 0; s < nsplit; s++) {
    long long o = ((long long)s * nh + h) * 2;
    if (part_ml[o + 1] > 0.f) den += expf(part_ml[o] - M) * part_ml[o + 1];
  }
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float num = 0.f;
    for (int s = 0; s < nsplit; s++) {
      long long o = ((long long)s * nh + h) * 2;
      if (part_ml[o + 1] > 0.f) num += expf(part_ml[o] - M) * part_acc[((long long)s * nh + h) * d + c];
    }
    out[(long long)h * d + c] = from_f32<T>(num / den);
  }
}


// argmax over each row of x [rows, V]: the first maximum, a NaN above
// every number. One block per row.

__device__ __forceinline__ bool am_better(float a, int ia, float b, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  bool an = a != a, bn = b != b;
  if (an || bn) {
    if (an && bn) return ia < ib;
    return an;
  }
  if (a != b) return a > b;
  return ia < ib;
}

template <typename T>
__global__ void argmax(int rows, int V, const T* __restrict__ x, int* __restrict__ out) {
  __shared__ float wv[32];
  __shared__ int wi[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const T* xr = x + (long long)r * V;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  float bv = 0.f;
  int bi = -1;
  for (int i = tid; i < V; i += blockDim.x) {
    float v = to_f32(xr[i]);
    if (am_better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (am_better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    wv[warp] = bv;
    wi[warp] = bi;
  }
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < nwarps; w++) {
      if (am_better(wv[w], wi[w], bv, bi)) {
        bv = wv[w];
        bi = wi[w];
      }
    }
    out[r] = bi;
  }
}
