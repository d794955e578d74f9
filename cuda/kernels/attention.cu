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

// ---------------------------------------------------------------------------
// Prefill (a chunk of ntok tokens at consecutive positions pos[0], pos[0]+1,
// ...). Keys before pos[0] come from the cache (linear, or the ring, which
// holds the window before the chunk); the chunk's own keys are read from k
// and v directly, so a chunk longer than a window never reads a ring slot
// it would overwrite (kv_compact_ring / kv_append run after).
//
// Flash-attention style: a block takes ATT_BQ rows of one kv head, a row
// being a (token, query head of the group) pair, so every K/V tile loaded
// serves the whole group. It walks ATT_BK-key tiles from the first key any
// of its rows can see to the last, so tiles wholly outside a sliding window
// (or past the causal diagonal) are never visited; an online softmax in
// float32 keeps running max and sum per row. 128 threads: scores by 2x4
// register tiles, output rows 8 per warp with DCH channel chunks of 32 per
// lane (d <= 32*DCH).
//
// Dynamic shared memory (floats, dp = 32*DCH): Q [BQ][dp+1], K [BK][dp+1],
// V [BK][dp], S [BQ][BK+1], and 4*BQ for row max, sum, rescale, position.

#define ATT_BQ 32
#define ATT_BK 32

template <typename T, int DCH>
__global__ void __launch_bounds__(128) attn_prefill(int ntok, int nh, int nkv, int d, int window, int slots,
                                                    float scale, const int* __restrict__ pos,
                                                    const T* __restrict__ q, long long ldq,
                                                    const T* __restrict__ k, const T* __restrict__ v,
                                                    long long ldkv, const T* __restrict__ kc,
                                                    const T* __restrict__ vc, T* __restrict__ out,
                                                    long long ldo) {
  const int dp = 32 * DCH;
  extern __shared__ float pf_smem[];
  float* Qs = pf_smem;                  // [BQ][dp+1]
  float* Ks = Qs + ATT_BQ * (dp + 1);   // [BK][dp+1]
  float* Vs = Ks + ATT_BK * (dp + 1);   // [BK][dp]
  float* S = Vs + ATT_BK * dp;          // [BQ][BK+1]
  float* rm = S + ATT_BQ * (ATT_BK + 1);  // [BQ]
  float* rl = rm + ATT_BQ;
  float* ra = rl + ATT_BQ;
  int* rp = (int*)(ra + ATT_BQ);

  int group = nh / nkv;
  int kvh = blockIdx.y;
  int R = ntok * group;
  int r0 = blockIdx.x * ATT_BQ;
  int nr = min(ATT_BQ, R - r0);
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int p0 = pos[0];

  for (int i = tid; i < ATT_BQ * dp; i += blockDim.x) {
    int r = i / dp, c = i - r * dp;
    float val = 0.f;
    if (r < nr && c < d) {
      int row = r0 + r, t = row / group, h = kvh * group + row % group;
      val = to_f32(q[t * ldq + (long long)h * d + c]);
    }
    Qs[r * (dp + 1) + c] = val;
  }
  if (tid < ATT_BQ) {
    rp[tid] = tid < nr ? pos[(r0 + tid) / group] : -1;
    rm[tid] = ATT_NEG_INF;
    rl[tid] = 0.f;
  }
  int plo = pos[r0 / group], phi = pos[(r0 + nr - 1) / group];
  int jlo = window > 0 ? max(0, plo - window + 1) : 0;
  int jhi = phi;

  float o[8][DCH];
#pragma unroll
  for (int rr = 0; rr < 8; rr++)
#pragma unroll
    for (int i = 0; i < DCH; i++) o[rr][i] = 0.f;

  long long crow = (long long)nkv * d;
  int tq = tid >> 3, tk = tid & 7;  // score tile: rows 2tq, 2tq+1; keys tk + 8i
  int sr = tid >> 2, sub = tid & 3;  // softmax: 4 threads per row, 8 keys each
  __syncthreads();

  for (int j0 = jlo; j0 <= jhi; j0 += ATT_BK) {
    for (int i = tid; i < ATT_BK * dp; i += blockDim.x) {
      int kk = i / dp, c = i - kk * dp;
      int j = j0 + kk;
      float kv = 0.f, vv = 0.f;
      if (j <= jhi && c < d) {
        if (j >= p0) {
          long long off = (long long)(j - p0) * ldkv + (long long)kvh * d + c;
          kv = to_f32(k[off]);
          vv = to_f32(v[off]);
        } else if (att_slot(j, window) < slots) {  // guard only: the host keeps pos < slots
          long long off = (long long)att_slot(j, window) * crow + (long long)kvh * d + c;
          kv = to_f32(kc[off]);
          vv = to_f32(vc[off]);
        }
      }
      Ks[kk * (dp + 1) + c] = kv;
      Vs[kk * dp + c] = vv;
    }
    __syncthreads();

    float s[2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
      for (int b = 0; b < 4; b++) s[a][b] = 0.f;
    const float* q0 = Qs + (2 * tq) * (dp + 1);
    const float* q1 = q0 + (dp + 1);
    for (int c = 0; c < d; c++) {
      float a0 = q0[c], a1 = q1[c];
#pragma unroll
      for (int b = 0; b < 4; b++) {
        float kv = Ks[(tk + 8 * b) * (dp + 1) + c];
        s[0][b] += a0 * kv;
        s[1][b] += a1 * kv;
      }
    }
#pragma unroll
    for (int a = 0; a < 2; a++) {
      int r = 2 * tq + a;
      int pr = rp[r];
#pragma unroll
      for (int b = 0; b < 4; b++) {
        int kk = tk + 8 * b, j = j0 + kk;
        bool ok = r < nr && j <= pr && j <= jhi && (window == 0 || j > pr - window);
        S[r * (ATT_BK + 1) + kk] = ok ? s[a][b] * scale : ATT_NEG_INF;
      }
    }
    __syncthreads();

    {
      float* srow = S + sr * (ATT_BK + 1) + sub * 8;
      float mx = ATT_NEG_INF;
#pragma unroll
      for (int x = 0; x < 8; x++) mx = fmaxf(mx, srow[x]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float mold = rm[sr];
      float mnew = fmaxf(mold, mx);
      float sum = 0.f, alpha = 1.f;
      if (mnew == ATT_NEG_INF) {  // nothing visible yet in this row
#pragma unroll
        for (int x = 0; x < 8; x++) srow[x] = 0.f;
      } else {
        alpha = expf(mold - mnew);
#pragma unroll
        for (int x = 0; x < 8; x++) {
          float e = expf(srow[x] - mnew);
          srow[x] = e;
          sum += e;
        }
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (sub == 0) {
        rl[sr] = rl[sr] * alpha + sum;
        rm[sr] = mnew;
        ra[sr] = alpha;
      }
    }
    __syncthreads();

#pragma unroll
    for (int rr = 0; rr < 8; rr++) {
      float a = ra[warp * 8 + rr];
#pragma unroll
      for (int i = 0; i < DCH; i++) o[rr][i] *= a;
    }
    for (int kk = 0; kk < ATT_BK; kk++) {
      float vv[DCH];
#pragma unroll
      for (int i = 0; i < DCH; i++) vv[i] = Vs[kk * dp + lane + 32 * i];
#pragma unroll
      for (int rr = 0; rr < 8; rr++) {
        float pr = S[(warp * 8 + rr) * (ATT_BK + 1) + kk];
#pragma unroll
        for (int i = 0; i < DCH; i++) o[rr][i] += pr * vv[i];
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int rr = 0; rr < 8; rr++) {
    int r = warp * 8 + rr;
    if (r < nr) {
      int row = r0 + r, t = row / group, h = kvh * group + row % group;
      float inv = 1.f / rl[r];
#pragma unroll
      for (int i = 0; i < DCH; i++) {
        int c = lane + 32 * i;
        if (c < d) out[t * ldo + (long long)h * d + c] = from_f32<T>(o[rr][i] * inv);
      }
    }
  }
}
