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
__global__ void __launch_bounds__(1024) moe_schedule(int E, int nchunks, int BM, int mode, const int* __restrict__ hist,
                                                     int* __restrict__ counts, int* __restrict__ order,
                                                     int* __restrict__ offsets, int* __restrict__ base,
                                                     int4* __restrict__ tiles, int* __restrict__ ntiles) {
  pdl_wait();
  __shared__ int cnt[1024], ord[1024], srow[1024], stile[1024];
  const int tid = threadIdx.x;
  int c = 0;
  if (tid < E) {
#pragma unroll 8
    for (int b = 0; b < nchunks; b++) c += hist[(long long)b * E + tid];
    cnt[tid] = c;
    counts[tid] = c;
  }
  __syncthreads();
  if (tid < E) {
    int rank = tid;
    if (mode == 1) {
      rank = 0;
      for (int f = 0; f < E; f++) {
        const int cf = cnt[f];
        rank += (cf > c) || (cf == c && f < tid);
      }
    }
    ord[rank] = tid;
  }
  __syncthreads();
  // Inclusive scans, over schedule position, of rows and of tiles.
  int rows = 0, nt = 0;
  if (tid < E) {
    rows = cnt[ord[tid]];
    nt = (rows + BM - 1) / BM;
  }
  srow[tid] = rows;
  stile[tid] = nt;
  __syncthreads();
  for (int d = 1; d < 1024; d <<= 1) {
    const int a = tid >= d ? srow[tid - d] : 0, b = tid >= d ? stile[tid - d] : 0;
    __syncthreads();
    srow[tid] += a;
    stile[tid] += b;
    __syncthreads();
  }
  if (tid < E) {
    const int e = ord[tid];
    const int off = srow[tid] - rows, toff = stile[tid] - nt;
    order[tid] = e;
    offsets[e] = off;
    for (int m = 0; m < nt; m++) tiles[toff + m] = make_int4(e, off + m * BM, min(BM, rows - m * BM), 0);
    int run = off;
#pragma unroll 8
    for (int b = 0; b < nchunks; b++) {
      base[(long long)b * E + e] = run;
      run += hist[(long long)b * E + e];
    }
  }
  if (tid == 1023) ntiles[0] = stile[1023];
}

// One warp per chunk places the chunk's routes at base[b*E+e] onwards in
// route order (stable), so grouped rows never depend on timing:
// sorted[p] = r and pos[r] = p (-1 for an invalid id).
#define MOE_PIECE 1024
__global__ void __launch_bounds__(32) moe_scatter(int R, int E, int CH, const int* __restrict__ ids,
                                                  const int* __restrict__ base, int* __restrict__ sorted,
                                                  int* __restrict__ pos) {
  pdl_wait();
  __shared__ int cur[1024];
  __shared__ int sid[MOE_PIECE];
  const int lane = threadIdx.x;
  for (int e = lane; e < E; e += 32) cur[e] = base[(long long)blockIdx.x * E + e];
  const int r0 = blockIdx.x * CH, r1 = min(R, r0 + CH);
  for (int p0 = r0; p0 < r1; p0 += MOE_PIECE) {
    const int n = min(MOE_PIECE, r1 - p0);
    __syncwarp();
#pragma unroll 4
    for (int i = lane; i < n; i += 32) sid[i] = ids[p0 + i];  // loads in flight together
    __syncwarp();
    for (int s = 0; s < n; s += 32) {
      const int i = s + lane;
      int e = i < n ? sid[i] : -1;
      const bool ok = e >= 0 && e < E;
      if (!ok) e = -1 - lane;  // a key no other lane has
      const unsigned same = __match_any_sync(0xffffffffu, e);
      int p = -1;
      if (ok) p = cur[e] + __popc(same & ((1u << lane) - 1u));
      __syncwarp();
      if (ok && lane == __ffs(same) - 1) cur[e] += __popc(same);
      __syncwarp();
      if (i < n) {
        pos[p0 + i] = p;
        if (ok) sorted[p] = p0 + i;
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
    float acc[V];
#pragma unroll
    for (int q = 0; q < V; q++) acc[q] = 0.f;
    for (int j = 0; j < k; j++) {
      const int p = pos[t * k + j];
      if (p < 0) continue;
      const float wt = weights[t * k + j];
      float f[V];
      if constexpr (V == 8) {
        load_x<8>(ys + (long long)p * H + h0, f);
      } else {
#pragma unroll
        for (int q = 0; q < V; q++) f[q] = to_f32(ys[(long long)p * H + h0 + q]);
      }
#pragma unroll
      for (int q = 0; q < V; q++) acc[q] = fmaf(wt, f[q], acc[q]);
    }
#pragma unroll
    for (int q = 0; q < V; q++) {
      const long long o = (long long)t * H + h0 + q;
      float v = acc[q];
      if (accumulate) v += to_f32(out[o]);
      out[o] = from_f32<TY>(v);
    }
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
