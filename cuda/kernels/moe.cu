// Routed experts of an MoE layer (moe_experts in docs/CONTRACTS.md):
//   out[t] = sum_j weights[t,j] * down_e(silu(gate_e x_t) * up_e x_t), e = ids[t,j]
// with x [T,H], weights f32 [T,k], ids i32 [T,k], gate/up [E,I,H], down
// [E,H,I]. exec/gpu compiles this file after matmul.cu: it uses that file's
// warp_dots, mma_tile, mma_brow and mma_epilogue.
//
// Decode (a few tokens): moe_gateup_gemv and moe_down_gemv read only the
// selected experts' rows, a warp per row, the weighted sum over the k slots
// fused into the down GEMV in slot order.
// Prefill: moe_hist, moe_schedule and moe_scatter group the T*k routes by
// expert on the device (stable: route order within an expert), then
// moe_gateup_mma and moe_down_mma run grouped tensor-core GEMMs over the
// schedule's tiles, and moe_combine adds each token's k results in slot
// order. No atomics touch floats, so results are bitwise reproducible.
// Ids outside [0, E) contribute nothing and are never dereferenced.

// ---------------------------------------------------------------- decode

// act[r, i] = silu(gate_e[i] . x_t) * (up_e[i] . x_t) for route r = t*k + j,
// e = ids[r]: one warp per (r, i), i fastest so neighbouring warps stream
// neighbouring rows of one expert. act is f32 [R, I].
template <typename TX, typename TW, int VEC>
__global__ void __launch_bounds__(256) moe_gateup_gemv(int R, int k, int H, int I, int E, const TX* __restrict__ x,
                                                       const int* __restrict__ ids, const TW* __restrict__ gate,
                                                       const TW* __restrict__ up, float* __restrict__ act) {
  pdl_wait();
  const long long gw = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (gw >= (long long)R * I) return;  // the whole warp leaves together
  const int r = (int)(gw / I), i = (int)(gw % I);
  const int e = ids[r];
  if (e < 0 || e >= E) {
    if (lane == 0) act[gw] = 0.f;
    return;
  }
  const TW* wr[2];
  wr[0] = gate + ((long long)e * I + i) * H;
  wr[1] = up + ((long long)e * I + i) * H;
  float acc[2][1];
  acc[0][0] = acc[1][0] = 0.f;
  warp_dots<TX, TW, 2, 1, VEC>(wr, x + (long long)(r / k) * H, H, H, lane, 32, acc);
  const float g = warp_sum(acc[0][0]), u = warp_sum(acc[1][0]);
  if (lane == 0) act[gw] = silu_f(g) * u;
}

// out[t, h] = sum_j weights[t,j] * (down_e[h] . act[t*k+j]) (+ out): one
// warp per (t, h). With 16-byte loads and k <= 32 the warp streams the k
// expert rows as one flattened sequence of vectors (the act rows of token
// t are contiguous), so loads of several slots are in flight together; an
// invalid id reads expert 0's row with weight 0 (in bounds, adds nothing).
template <typename TW, typename TY, int VEC>
__global__ void __launch_bounds__(256) moe_down_gemv(int T, int k, int H, int I, int E, const float* __restrict__ act,
                                                     const float* __restrict__ weights, const int* __restrict__ ids,
                                                     const TW* __restrict__ down, TY* __restrict__ out,
                                                     int accumulate) {
  pdl_wait();
  __shared__ const TW* srow[8][32];
  __shared__ float swt[8][32];
  const long long gw = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (gw >= (long long)T * H) return;  // whole warps; no block barrier below
  const int t = (int)(gw / H), h = (int)(gw % H);
  float acc = 0.f;
  if constexpr (VEC) {
    if (k <= 32) {
      constexpr int P = Pack<TW>::N;
      if (lane < k) {
        const int e = ids[t * k + lane];
        const bool ok = e >= 0 && e < E;
        srow[warp][lane] = down + ((long long)(ok ? e : 0) * H + h) * I;
        swt[warp][lane] = ok ? weights[t * k + lane] : 0.f;
      }
      __syncwarp();
      const int vpr = I / P, nv = k * vpr;
      const float* arow = act + (long long)t * k * I;
      constexpr int U = 4;
      int v = lane;
      for (; v + (U - 1) * 32 < nv; v += U * 32) {
        uint4 raw[U];
        int j[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
          const int vv = v + u * 32;
          j[u] = vv / vpr;
          raw[u] = ld_stream(srow[warp][j[u]] + (long long)(vv - j[u] * vpr) * P);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
          float wf[P], xf[P];
          Pack<TW>::unpack(raw[u], wf);
          load_x<P>(arow + (long long)(v + u * 32) * P, xf);
          float d = 0.f;
#pragma unroll
          for (int i = 0; i < P; i++) d = fmaf(xf[i], wf[i], d);
          acc = fmaf(swt[warp][j[u]], d, acc);
        }
      }
      for (; v < nv; v += 32) {
        const int jj = v / vpr;
        float wf[P], xf[P];
        Pack<TW>::unpack(ld_stream(srow[warp][jj] + (long long)(v - jj * vpr) * P), wf);
        load_x<P>(arow + (long long)v * P, xf);
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < P; i++) d = fmaf(xf[i], wf[i], d);
        acc = fmaf(swt[warp][jj], d, acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) {
        if (accumulate) acc += to_f32(out[gw]);
        out[gw] = from_f32<TY>(acc);
      }
      return;
    }
  }
  for (int j = 0; j < k; j++) {
    const int r = t * k + j;
    const int e = ids[r];
    if (e < 0 || e >= E) continue;
    const TW* wr[1] = {down + ((long long)e * H + h) * I};
    float p[1][1] = {{0.f}};
    warp_dots<float, TW, 1, 1, VEC>(wr, act + (long long)r * I, I, I, lane, 32, p);
    acc = fmaf(weights[r], p[0][0], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) {
    if (accumulate) acc += to_f32(out[gw]);
    out[gw] = from_f32<TY>(acc);
  }
}

// --------------------------------------------------------------- grouping

// Routes are taken in chunks: chunk b is routes [b*CH, min(R, (b+1)*CH)).
// hist[b*E + e] = routes of chunk b on expert e (E <= 1024).
__global__ void __launch_bounds__(256) moe_hist(int R, int E, int CH, const int* __restrict__ ids,
                                                int* __restrict__ hist) {
  pdl_wait();
  __shared__ int cnt[1024];
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  const int r0 = blockIdx.x * CH, r1 = min(R, r0 + CH);
  for (int r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
    const int e = ids[r];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);  // integer: order-free
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[(long long)blockIdx.x * E + e] = cnt[e];
}

// The expert schedule, decided here and nowhere else. One block of 1024
// threads, E <= 1024. mode 0: experts in ascending id; mode 1: descending
// routes per expert, ties by id (what the expert-order pass asks for). The
// order fixes where each expert's rows sit in the grouped buffers and the
// order of the GEMM tiles (CTAs are started in tile order).
// Writes counts[e], order[i] (the i-th expert scheduled), offsets[e] (its
// first grouped row), base[b*E+e] (first row of chunk b's routes to e),
// tiles[t] = {e, first row, rows (<= BM), 0} and ntiles[0].
//
// The work is spread over the block (it is latency, not bandwidth): expert
// e has P = min(1024/E, 32) threads (tid = p*E + e, so a warp reads
// consecutive experts of one hist row), the p-th summing the p-th group of
// chunks with all its loads in flight and keeping them (up to
// MOE_SCHED_REGS) for its part of base; mode 1's rank is counted over P
// slices of the experts; the scans over schedule positions are warp
// shuffles. Needs nchunks*E < 2^31.
#define MOE_SCHED_REGS 32

// How many of c[lo, hi) are >= th, all in [0, 2^30 + 1]: x >= th is the
// sign of th-1-x (two instructions, no select); 16-byte loads where aligned.
__device__ __forceinline__ int moe_count_ge(const int* c, int lo, int hi, int th) {
  const int t = th - 1;
  unsigned n = 0;
  for (; lo < hi && (lo & 3); lo++) n += (unsigned)(t - c[lo]) >> 31;
  for (; lo + 4 <= hi; lo += 4) {
    const int4 q = *reinterpret_cast<const int4*>(c + lo);
    n += ((unsigned)(t - q.x) >> 31) + ((unsigned)(t - q.y) >> 31) + ((unsigned)(t - q.z) >> 31) +
         ((unsigned)(t - q.w) >> 31);
  }
  for (; lo < hi; lo++) n += (unsigned)(t - c[lo]) >> 31;
  return (int)n;
}

__global__ void __launch_bounds__(1024) moe_schedule(int E, int nchunks, int BM, int mode, const int* __restrict__ hist,
                                                     int* __restrict__ counts, int* __restrict__ order,
                                                     int* __restrict__ offsets, int* __restrict__ base,
                                                     int4* __restrict__ tiles, int* __restrict__ ntiles) {
  pdl_wait();
  constexpr int U = MOE_SCHED_REGS;
  __shared__ __align__(16) int cnt[1024];
  __shared__ int part[1024], rk[1024], ord[1024], soff[1024], stoff[1024], wrow[32], wtile[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int P = max(1, min(1024 / E, 32));
  const bool act = tid < P * E;
  const int e = act ? tid % E : 0, p = act ? tid / E : 0;
  const int nb = (nchunks + P - 1) / P, b0 = min(nchunks, p * nb), b1 = act ? min(nchunks, b0 + nb) : b0;
  // Chunks b0..b1-1 of expert e: their routes s, the first U kept in v.
  const int n = b1 - b0, last = max(n - 1, 0);
  const int h0 = n > 0 ? b0 * E + e : 0;
  int v[U], s = 0;
#pragma unroll
  for (int u = 0; u < U; u++) {
    v[u] = 0;
    // A uniform bound and an index kept in range, no per-thread predicate:
    // every load is issued before any is used (masked below).
    if (u < nb) v[u] = hist[h0 + min(u, last) * E];
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    v[u] = u < n ? v[u] : 0;
    s += v[u];
  }
#pragma unroll 8
  for (int b = b0 + U; b < b1; b++) s += hist[(long long)b * E + e];
  if (act) part[tid] = s;
  rk[tid] = 0;
  __syncthreads();
  // c: routes to e; pre: those in the chunks before b0.
  int c = 0, pre = 0;
  if (act) {
    for (int q = 0; q < P; q++) {
      const int x = part[q * E + e];
      c += x;
      pre += q < p ? x : 0;
    }
    if (p == 0) {
      cnt[e] = c;
      counts[e] = c;
    }
  }
  __syncthreads();
  if (mode == 1) {
    // rank = experts with more routes, or as many and a lower id; thread p
    // counts its slice [f0, f1) of them (ties below mid, strictly above).
    if (act) {
      const int fs = ((E + P - 1) / P + 3) & ~3, f0 = min(E, p * fs), f1 = min(E, f0 + fs);
      const int mid = min(f1, max(f0, e));
      const int r = moe_count_ge(cnt, f0, mid, c) + moe_count_ge(cnt, mid, f1, c + 1);
      if (r) atomicAdd(&rk[e], r);  // integer: order-free
    }
    __syncthreads();
  }
  if (act && p == 0) ord[mode == 1 ? rk[e] : e] = e;
  __syncthreads();
  // Schedule position tid: inclusive warp scans of rows and tiles, then
  // the totals of the warps before.
  int ei = 0, rows = 0, nt = 0;
  if (tid < E) {
    ei = ord[tid];
    rows = cnt[ei];
    nt = (rows + BM - 1) / BM;
  }
  int ir = rows, it = nt;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, ir, d), b = __shfl_up_sync(0xffffffffu, it, d);
    if (lane >= d) {
      ir += a;
      it += b;
    }
  }
  if (lane == 31) {
    wrow[warp] = ir;
    wtile[warp] = it;
  }
  __syncthreads();
  const int pr = __reduce_add_sync(0xffffffffu, lane < warp ? wrow[lane] : 0);
  const int pt = __reduce_add_sync(0xffffffffu, lane < warp ? wtile[lane] : 0);
  if (tid < E) {
    const int off = pr + ir - rows;
    order[tid] = ei;
    offsets[ei] = off;
    soff[ei] = off;
    stoff[ei] = pt + it - nt;
  }
  if (tid == 1023) ntiles[0] = pt + it;  // positions >= E add nothing
  __syncthreads();
  if (act) {
    const int off = soff[e], toff = stoff[e], ne = (c + BM - 1) / BM;
    for (int m = p; m < ne; m += P) tiles[toff + m] = make_int4(e, off + m * BM, min(BM, c - m * BM), 0);
    int run = off + pre;
    int* bcol = base + (long long)b0 * E + e;
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (b0 + u < b1) {
        bcol[(long long)u * E] = run;
        run += v[u];
      }
    }
#pragma unroll 8
    for (int b = b0 + U; b < b1; b++) {
      base[(long long)b * E + e] = run;
      run += hist[(long long)b * E + e];
    }
  }
}

// A block of MOE_SCATTER_WARPS warps per chunk places the chunk's routes at
// base[b*E+e] onwards in route order (stable), so grouped rows never depend
// on timing: sorted[p] = r and pos[r] = p (-1 for an invalid id). A route a
// thread, NT routes at a time: a route to e lands at cur[e] (e's next row)
// after e's routes in the earlier warps (wc[e][w]: routes to e in warp w)
// and in the earlier lanes of its own (__match_any_sync).
#define MOE_SCATTER_WARPS 8
__global__ void __launch_bounds__(MOE_SCATTER_WARPS * 32) moe_scatter(int R, int E, int CH,
                                                                      const int* __restrict__ ids,
                                                                      const int* __restrict__ base,
                                                                      int* __restrict__ sorted, int* __restrict__ pos) {
  pdl_wait();
  constexpr int NW = MOE_SCATTER_WARPS, NT = NW * 32;
  static_assert(NW == 8, "wc rows are read as two int4");
  __shared__ int cur[1024];
  __shared__ __align__(16) int wc[1024][NW];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r0 = blockIdx.x * CH, r1 = min(R, r0 + CH);
  int id = r0 + tid < r1 ? ids[r0 + tid] : -1;  // in flight with base
  for (int e = tid; e < E; e += NT) {
    cur[e] = base[(long long)blockIdx.x * E + e];
    *reinterpret_cast<int4*>(&wc[e][0]) = make_int4(0, 0, 0, 0);
    *reinterpret_cast<int4*>(&wc[e][4]) = make_int4(0, 0, 0, 0);
  }
  for (int p0 = r0; p0 < r1; p0 += NT) {
    const int i = p0 + tid;
    const bool ok = i < r1 && id >= 0 && id < E;
    const int key = ok ? id : -1 - lane;  // an invalid id: a key no other lane has
    __syncthreads();                      // cur and wc are this piece's
    const unsigned same = __match_any_sync(0xffffffffu, key);
    if (ok && lane == __ffs(same) - 1) wc[id][warp] = __popc(same);
    __syncthreads();
    int p = -1;
    if (ok) {
      const int4 a = *reinterpret_cast<const int4*>(&wc[id][0]), b = *reinterpret_cast<const int4*>(&wc[id][4]);
      const int w[NW] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      p = cur[id] + __popc(same & ((1u << lane) - 1u));
#pragma unroll
      for (int q = 0; q < NW; q++) p += q < warp ? w[q] : 0;
    }
    if (i < r1) {
      pos[i] = p;
      if (ok) sorted[p] = i;
    }
    if (p0 + NT < r1) {  // another piece: next id, cur past this piece, wc cleared
      id = i + NT < r1 ? ids[i + NT] : -1;
      __syncthreads();
      for (int e = tid; e < E; e += NT) {
        const int4 a = *reinterpret_cast<const int4*>(&wc[e][0]), b = *reinterpret_cast<const int4*>(&wc[e][4]);
        cur[e] += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
        *reinterpret_cast<int4*>(&wc[e][0]) = make_int4(0, 0, 0, 0);
        *reinterpret_cast<int4*>(&wc[e][4]) = make_int4(0, 0, 0, 0);
      }
    }
  }
}

// ---------------------------------------------------------- grouped GEMMs

// moe_cta maps this CTA to (tile, n-block). The grid is (tiles, n-blocks)
// and CTAs start in launch order (x fastest). band <= 1 keeps that order:
// every tile of every expert for n-block 0, then n-block 1, ... band > 1
// walks the n-blocks in bands of `band`: within a band each tile takes its
// band's n-blocks back to back (its activation rows stay in L2) and the
// expert's next tiles follow while that band of its weight rows is still in
// L2. Only the order changes, never a result.
__device__ __forceinline__ void moe_cta(int band, int& tile, int& nb) {
  const int tiles = gridDim.x, nbs = gridDim.y;
  if (band <= 1) {
    tile = blockIdx.x;
    nb = blockIdx.y;
    return;
  }
  const int lin = blockIdx.y * tiles + blockIdx.x;
  const int per = tiles * band, b = lin / per, r = lin % per;
  const int nb0 = b * band, w = min(band, nbs - nb0);
  tile = r / w;
  nb = nb0 + r % w;
}

// act[p, :] = silu(x_t gate_e^T) * (x_t up_e^T) for grouped row p of a
// tile (route sorted[p], token sorted[p]/k), 64 columns of I per n-block
// (see moe_cta). The x rows are gathered by the tile loads themselves.
template <int MI, int BK>
__global__ void __launch_bounds__(256) moe_gateup_mma(int k, int H, int I, const bf16_t* __restrict__ x,
                                                      const int* __restrict__ sorted, const int4* __restrict__ tiles,
                                                      const int* __restrict__ ntiles, const bf16_t* __restrict__ gate,
                                                      const bf16_t* __restrict__ up, bf16_t* __restrict__ act, int band) {
  pdl_wait();
  extern __shared__ __align__(128) unsigned char mma_smem[];
  using C = MmaCfg<MI, BK>;
  int tile, nb;
  moe_cta(band, tile, nb);
  if (tile >= *ntiles) return;  // the grid is sized for the worst case
  const int4 td = tiles[tile];
  const int e = td.x, start = td.y, rows = td.z;
  const int n0 = nb * 64;
  const bf16_t* ap[C::AP];
  const bf16_t* bp[C::BP];
#pragma unroll
  for (int i = 0; i < C::AP; i++) {
    const int r = mma_row<MI, BK>(i);
    ap[i] = r < rows ? x + (long long)(sorted[start + r] / k) * H : nullptr;
  }
  const bf16_t* ge = gate + (long long)e * I * H;
  const bf16_t* ue = up + (long long)e * I * H;
#pragma unroll
  for (int i = 0; i < C::BP; i++) bp[i] = mma_brow<1>(ge, ue, I, H, n0, mma_row<MI, BK>(i));
  float acc[MI][4][4];
  mma_tile<MI, BK>(acc, ap, bp, H, reinterpret_cast<bf16_t*>(mma_smem), x);
  mma_epilogue<MI, 1>(acc, [&](int r, int c, float v) {
    const int col = n0 + c;
    if (r < rows && col < I) act[(long long)(start + r) * I + col] = from_f32<bf16_t>(v);
  });
}

// ys[p, :] = act[p, :] down_e^T for the grouped rows of a tile, 128
// columns of H per n-block (see moe_cta).
template <int MI, int BK>
__global__ void __launch_bounds__(256) moe_down_mma(int H, int I, const bf16_t* __restrict__ act,
                                                    const int4* __restrict__ tiles, const int* __restrict__ ntiles,
                                                    const bf16_t* __restrict__ down, bf16_t* __restrict__ ys, int band) {
  pdl_wait();
  extern __shared__ __align__(128) unsigned char mma_smem[];
  using C = MmaCfg<MI, BK>;
  int tile, nb;
  moe_cta(band, tile, nb);
  if (tile >= *ntiles) return;
  const int4 td = tiles[tile];
  const int e = td.x, start = td.y, rows = td.z;
  const int n0 = nb * MMA_BN;
  const bf16_t* ap[C::AP];
  const bf16_t* bp[C::BP];
#pragma unroll
  for (int i = 0; i < C::AP; i++) {
    const int r = mma_row<MI, BK>(i);
    ap[i] = r < rows ? act + (long long)(start + r) * I : nullptr;
  }
  const bf16_t* de = down + (long long)e * H * I;
#pragma unroll
  for (int i = 0; i < C::BP; i++) bp[i] = mma_brow<0>(de, de, H, I, n0, mma_row<MI, BK>(i));
  float acc[MI][4][4];
  mma_tile<MI, BK>(acc, ap, bp, I, reinterpret_cast<bf16_t*>(mma_smem), act);
  mma_epilogue<MI, 0>(acc, [&](int r, int c, float v) {
    const int col = n0 + c;
    if (r < rows && col < H) ys[(long long)(start + r) * H + col] = from_f32<bf16_t>(v);
  });
}

// moe_combine_at: out[t, h0..h0+V) = sum_j weights[t,j] * ys[pos[t,j], h]
// (+ out), slots in order (moe_combine's values, moe_combine_norm's too);
// st gets them as stored.
template <typename TY, int V>
__device__ __forceinline__ void moe_combine_at(int t, int h0, int k, int H, const float* __restrict__ weights,
                                               const int* __restrict__ pos, const bf16_t* __restrict__ ys, TY* out,
                                               int accumulate, float (&st)[V]) {
  float acc[V];
#pragma unroll
  for (int q = 0; q < V; q++) acc[q] = 0.f;
  if constexpr (V == 8) {
    // KB slots' rows asked for before the first is summed: one at a time
    // left a thread a single 16-byte load in flight, latency-bound. The
    // sum keeps slot order, so the bits are the same.
    constexpr int KB = 4;
    for (int j0 = 0; j0 < k; j0 += KB) {
      int p[KB];
      float wt[KB];
      uint4 u[KB];
#pragma unroll
      for (int b = 0; b < KB; b++) p[b] = j0 + b < k ? pos[t * k + j0 + b] : -1;
#pragma unroll
      for (int b = 0; b < KB; b++)
        if (p[b] >= 0) {
          wt[b] = weights[t * k + j0 + b];
          u[b] = *reinterpret_cast<const uint4*>(ys + (long long)p[b] * H + h0);
        }
#pragma unroll
      for (int b = 0; b < KB; b++)
        if (p[b] >= 0) {
          float f[8];
          Pack<bf16_t>::unpack(u[b], f);
#pragma unroll
          for (int q = 0; q < 8; q++) acc[q] = fmaf(wt[b], f[q], acc[q]);
        }
    }
  } else {
    for (int j = 0; j < k; j++) {
      const int p = pos[t * k + j];
      if (p < 0) continue;
      const float wt = weights[t * k + j];
#pragma unroll
      for (int q = 0; q < V; q++) acc[q] = fmaf(wt, to_f32(ys[(long long)p * H + h0 + q]), acc[q]);
    }
  }
#pragma unroll
  for (int q = 0; q < V; q++) {
    const long long o = (long long)t * H + h0 + q;
    float v = acc[q];
    if (accumulate) v += to_f32(out[o]);
    const TY y = from_f32<TY>(v);
    out[o] = y;
    st[q] = to_f32(y);
  }
}

// out[t, h] = sum_j weights[t,j] * ys[pos[t,j], h] (+ out), slots in order;
// V consecutive h per thread (V = 8 needs H % 8 == 0).
template <typename TY, int V>
__global__ void __launch_bounds__(256) moe_combine(int T, int k, int H, const float* __restrict__ weights,
                                                   const int* __restrict__ pos, const bf16_t* __restrict__ ys,
                                                   TY* __restrict__ out, int accumulate) {
  pdl_wait();
  const int HV = H / V;
  LAGC_FOR(i, (long long)T * HV) {
    const int t = (int)(i / HV), h0 = (int)(i % HV) * V;
    float st[V];
    moe_combine_at<TY, V>(t, h0, k, H, weights, pos, ys, out, accumulate, st);
  }
}

// moe_combine_norm is moe_combine<TY, 8> then rms_norm_block<TY, To>(out)
// into nout (lower.MoECombineNorm, made by fuseCombineNorm where a bf16
// model's MoE layer ends and the next layer's norm reads its sum): a block
// a token, of the norm's block size, a thread a chunk of 8 (H <= 8192; out,
// w and nout 16-byte aligned, so the norm takes its 16-byte path). Each
// thread keeps its chunk as stored and normalises it as norm_row's 16-byte
// path does (the same square sum, warp and block sums, scale and product),
// so both outputs keep the two launches' bits, in one launch and without
// reading the rows back. nout lies apart from weights, pos, ys and out; w
// from out.
template <typename TY, typename To>
__global__ void __launch_bounds__(1024) moe_combine_norm(int T, int k, int H, const float* __restrict__ weights,
                                                         const int* __restrict__ pos, const bf16_t* __restrict__ ys, TY* out,
                                                         int accumulate, float eps, const float* __restrict__ w,
                                                         To* __restrict__ nout) {
  pdl_wait();
  __shared__ float red[32];
  const int t = blockIdx.x, c = threadIdx.x, lane = c & 31, warp = c >> 5;
  if (t >= T) return;
  const bool has = c < H / 8;
  float v[8], ss = 0.f;
  if (has) {
    moe_combine_at<TY, 8>(t, 8 * c, k, H, weights, pos, ys, out, accumulate, v);
#pragma unroll
    for (int e = 0; e < 8; e++) ss += v[e] * v[e];
  }
  ss = norm_warp_sum(ss);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  ss = norm_warp_sum(lane < (blockDim.x >> 5) ? red[lane] : 0.f);
  const float inv = 1.f / sqrtf(ss / (float)H + eps);
  if (has) {
    float wv[8], o[8];
    norm_load8(w + 8 * c, wv);
#pragma unroll
    for (int e = 0; e < 8; e++) o[e] = wv[e] * (v[e] * inv);
    norm_store8(nout + (long long)t * H + 8 * c, o);
  }
}

// Routes of a moe_grouped with shared experts: token t's k routed experts
// and their weights, then the shared experts first..first+S-1 with weight 1
// (they sit at the end of the stacks and serve every token).
extern "C" __global__ void moe_add_shared(int T, int k, int S, int first, const float* __restrict__ w,
                                          const int* __restrict__ ids, float* __restrict__ w2, int* __restrict__ ids2) {
  pdl_wait();
  long long n = (long long)T * (k + S);
  LAGC_FOR(i, n) {
    long long t = i / (k + S);
    int j = (int)(i - t * (k + S));
    if (j < k) {
      w2[i] = w[t * k + j];
      ids2[i] = ids[t * k + j];
    } else {
      w2[i] = 1.f;
      ids2[i] = first + (j - k);
    }
  }
}
