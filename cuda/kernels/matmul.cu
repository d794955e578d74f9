// Matrix products y = x w^T with weights in HF layout (w [N,K] row-major)
// and f32 accumulation:
//   gemv         decode, up to 8 token rows; streams w at full bandwidth
//   gemm_bf16    prefill on tensor cores (mma.sync m16n8k16, ldmatrix,
//                cp.async multistage), bf16 x and w
//   gemm_simple  tiled FFMA for the f32 mode and shapes the others refuse
// Every output element is one dot product summed in an order fixed by the
// kernel and the shape alone, so results are deterministic.
// Epilogues: accumulate (y += x w^T, for residual folding) and SwiGLU (w is
// [gate; up] = [2N, K], y = silu(x gate^T) * (x up^T)).
// moe.cu and router.cu are compiled with this file in front of them and
// reuse its pieces.

// ---------------------------------------------------------------- helpers

__device__ __forceinline__ float silu_f(float v) { return v / (1.f + expf(-v)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Weights are read once: a 16-byte load that does not allocate in L1.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ void bf16x2_f(unsigned int u, float& lo, float& hi) {
  lo = __uint_as_float(u << 16);  // the element at the lower address
  hi = __uint_as_float(u & 0xffff0000u);
}

// Pack<T>: how many T fill 16 bytes, and their conversion to float.
template <typename T> struct Pack;
template <> struct Pack<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void unpack(uint4 u, float* o) {
    o[0] = __uint_as_float(u.x);
    o[1] = __uint_as_float(u.y);
    o[2] = __uint_as_float(u.z);
    o[3] = __uint_as_float(u.w);
  }
};
template <> struct Pack<bf16_t> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(uint4 u, float* o) {
    bf16x2_f(u.x, o[0], o[1]);
    bf16x2_f(u.y, o[2], o[3]);
    bf16x2_f(u.z, o[4], o[5]);
    bf16x2_f(u.w, o[6], o[7]);
  }
};

// load_x<N>: N consecutive activations (N = 4 or 8, aligned to N elements)
// as floats. Activations are small and reused: ordinary cached loads.
template <int N> __device__ __forceinline__ void load_x(const float* p, float* o) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    float4 v = *reinterpret_cast<const float4*>(p + i);
    o[i] = v.x;
    o[i + 1] = v.y;
    o[i + 2] = v.z;
    o[i + 3] = v.w;
  }
}
template <int N> __device__ __forceinline__ void load_x(const bf16_t* p, float* o) {
  if constexpr (N == 8) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    bf16x2_f(u.x, o[0], o[1]);
    bf16x2_f(u.y, o[2], o[3]);
    bf16x2_f(u.z, o[4], o[5]);
    bf16x2_f(u.w, o[6], o[7]);
  } else {
    uint2 u = *reinterpret_cast<const uint2*>(p);
    bf16x2_f(u.x, o[0], o[1]);
    bf16x2_f(u.y, o[2], o[3]);
  }
}

// dot_vec: acc[q][r] += 16-byte vector v of weight row q (raw[q], as
// loaded) times the same elements of activation row r (x, row stride ldx).
template <typename TX, typename TW, int NW, int R>
__device__ __forceinline__ void dot_vec(const uint4 (&raw)[NW], const TX* __restrict__ x, long long ldx, int v,
                                        float (&acc)[NW][R]) {
  constexpr int P = Pack<TW>::N;
  float wf[NW][P];
#pragma unroll
  for (int q = 0; q < NW; q++) Pack<TW>::unpack(raw[q], wf[q]);
#pragma unroll
  for (int r = 0; r < R; r++) {
    float xf[P];
    load_x<P>(x + r * ldx + (long long)v * P, xf);
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
      for (int i = 0; i < P; i++) acc[q][r] = fmaf(xf[i], wf[q][i], acc[q][r]);
  }
}

// warp_dots: this lane's share of NW weight rows (wr) dotted with R
// activation rows (x, row stride ldx), over K. Lanes of `step/32` warps
// split the row: this lane takes 16-byte vectors first, first+step, ...,
// U of them in flight before any is used, and the last fewer than U
// likewise (so a row of few vectors per lane waits for memory once); the
// sums are in vector order. VEC=0: scalar loads for shapes or addresses
// that are not 16-byte aligned. The caller reduces acc over the lanes
// (warp_sum).
template <typename TX, typename TW, int NW, int R, int VEC>
__device__ __forceinline__ void warp_dots(const TW* const (&wr)[NW], const TX* __restrict__ x, long long ldx, int K,
                                          int first, int step, float (&acc)[NW][R]) {
  if constexpr (VEC) {
    constexpr int P = Pack<TW>::N;
    constexpr int U = 4;
    const int nv = K / P;
    int v = first;
    for (; v + (U - 1) * step < nv; v += U * step) {
      uint4 raw[U][NW];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < NW; q++) raw[u][q] = ld_stream(wr[q] + (long long)(v + u * step) * P);
#pragma unroll
      for (int u = 0; u < U; u++) dot_vec<TX, TW, NW, R>(raw[u], x, ldx, v + u * step, acc);
    }
    if (v < nv) {
      uint4 raw[U - 1][NW];
#pragma unroll
      for (int u = 0; u < U - 1; u++)
        if (v + u * step < nv)
#pragma unroll
          for (int q = 0; q < NW; q++) raw[u][q] = ld_stream(wr[q] + (long long)(v + u * step) * P);
#pragma unroll
      for (int u = 0; u < U - 1; u++) {
        if (v + u * step >= nv) break;
        dot_vec<TX, TW, NW, R>(raw[u], x, ldx, v + u * step, acc);
      }
    }
  } else {
    for (int kk = first; kk < K; kk += step) {
#pragma unroll
      for (int q = 0; q < NW; q++) {
        float wv = to_f32(wr[q][kk]);
#pragma unroll
        for (int r = 0; r < R; r++) acc[q][r] = fmaf(to_f32(x[r * ldx + kk]), wv, acc[q][r]);
      }
    }
  }
}

// ------------------------------------------------------------------- gemv

// y[r, n] = sum_k x[r, k] w[n, k] for R (<= 8) token rows. A block is 8
// warps; `split` (1, 2, 4 or 8) warps of one block share an output row, each
// taking every split-th 512-byte stretch of it, and their sums are added in
// warp order. With SWIGLU, w is [2N, K] and one warp streams both the gate
// row n and the up row N+n. gemv_block is block blk's rows, which
// router.cu's router_fused computes too (the same bits). SPLITY: the
// values go to *sy's outputs instead of y (gemv_split), the same sums.
template <typename TX, typename TW, typename TY, int R, int SWIGLU, int VEC, bool SPLITY = false>
__device__ __forceinline__ void gemv_block(int blk, int N, int K, int split, const TX* __restrict__ x,
                                           const TW* __restrict__ w, TY* __restrict__ y, int accumulate,
                                           const SplitY<TY>* sy = nullptr) {
  constexpr int NW = SWIGLU ? 2 : 1;
  __shared__ float part[8][NW][R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = blk * (8 / split) + warp / split;
  const int slice = warp % split;
  float acc[NW][R];
#pragma unroll
  for (int q = 0; q < NW; q++)
#pragma unroll
    for (int r = 0; r < R; r++) acc[q][r] = 0.f;
  if (n < N) {
    const TW* wr[NW];
    wr[0] = w + (long long)n * K;
    if constexpr (SWIGLU) wr[NW - 1] = w + (long long)(N + n) * K;
    warp_dots<TX, TW, NW, R, VEC>(wr, x, K, K, slice * 32 + lane, split * 32, acc);
  }
#pragma unroll
  for (int q = 0; q < NW; q++)
#pragma unroll
    for (int r = 0; r < R; r++) acc[q][r] = warp_sum(acc[q][r]);
  if (split > 1) {
    if (lane == 0)
#pragma unroll
      for (int q = 0; q < NW; q++)
#pragma unroll
        for (int r = 0; r < R; r++) part[warp][q][r] = acc[q][r];
    __syncthreads();
    if (slice == 0 && lane == 0)
#pragma unroll
      for (int q = 0; q < NW; q++)
#pragma unroll
        for (int r = 0; r < R; r++) {
          float s = 0.f;
          for (int i = 0; i < split; i++) s += part[warp + i][q][r];
          acc[q][r] = s;
        }
  }
  if (n < N && slice == 0 && lane == 0) {
#pragma unroll
    for (int r = 0; r < R; r++) {
      float v = SWIGLU ? silu_f(acc[0][r]) * acc[NW - 1][r] : acc[0][r];
      if constexpr (SPLITY) {
        sy->store(N, r, n, v);
      } else {
        const long long o = (long long)r * N + n;
        if (accumulate) v += to_f32(y[o]);
        y[o] = from_f32<TY>(v);
      }
    }
  }
}

template <typename TX, typename TW, typename TY, int R, int SWIGLU, int VEC>
__global__ void __launch_bounds__(256) gemv(int N, int K, int split, const TX* __restrict__ x,
                                            const TW* __restrict__ w, TY* __restrict__ y, int accumulate) {
  pdl_wait();
  gemv_block<TX, TW, TY, R, SWIGLU, VEC>(blockIdx.x, N, K, split, x, w, y, accumulate);
}

// gemv_split is gemv (no SwiGLU, no accumulation) writing its columns to
// up to four outputs (SplitY): a float model's batched decode step's q, k,
// v and gate in one launch, each value gemv's of the whole weight (the
// decode schedule's one GEMV): the same bits.
template <typename TX, typename TW, typename TY, int R, int VEC>
__global__ void __launch_bounds__(256) gemv_split(int N, int K, int split, const TX* __restrict__ x, const TW* __restrict__ w,
                                                  TY* y0, TY* y1, TY* y2, TY* y3, int end0, int end1, int end2) {
  pdl_wait();
  const SplitY<TY> sy{{y0, y1, y2, y3}, {end0, end1, end2}};
  gemv_block<TX, TW, TY, R, 0, VEC, true>(blockIdx.x, N, K, split, x, w, y0, 0, &sy);
}

// ------------------------------------------------- bf16 tensor-core tiles

// CTA tile BM x 128 x BK with BM = 32*MI and BK = 32 or 64; 8 warps as
// 2 (m) x 4 (n), each MI*16 x 32 of the output in m16n8k16 fragments; a
// cp.async pipeline of STAGES tiles. Shared-memory rows are padded by 8
// elements (80 or 144 bytes: 5 or 9 16-byte units, odd) so ldmatrix's eight
// 16-byte rows fall in distinct banks. exec/gpu's mmaSmemBytes mirrors
// SMEM.
#define MMA_BN 128
template <int MI, int BK> struct MmaCfg {
  static constexpr int BM = 32 * MI;
  static constexpr int STAGES = BK == 32 ? 4 : 3;
  static constexpr int PITCH = BK + 8;    // elements per shared-memory row
  static constexpr int CPR = BK / 8;      // 16-byte chunks per row
  static constexpr int RPP = 256 / CPR;   // rows 256 threads copy per pass
  static constexpr int AP = BM / RPP;     // passes over A's rows
  static constexpr int BP = MMA_BN / RPP; // passes over B's rows
  static constexpr int STAGE = (BM + MMA_BN) * PITCH;  // elements
  static constexpr int SMEM = STAGES * STAGE * 2;      // bytes
};

// The tile row this thread copies in pass i (of AP or BP passes).
template <int MI, int BK> __device__ __forceinline__ int mma_row(int i) {
  return threadIdx.x / MmaCfg<MI, BK>::CPR + MmaCfg<MI, BK>::RPP * i;
}

// acc += A B^T over K for one CTA tile, both operands K-contiguous bf16.
// ap[i] is the start of the A row this thread copies in pass i (tile row
// mma_row(i)), nullptr past the matrix; bp[i] likewise for B's 128 rows.
// `safe` is any valid global address (the source of zero-filled copies).
// K must be a multiple of 8: a 16-byte chunk is wholly inside or outside.
template <int MI, int BK>
__device__ __forceinline__ void mma_tile(float (&acc)[MI][4][4], const bf16_t* const* ap, const bf16_t* const* bp,
                                         int K, bf16_t* smem, const void* safe) {
  using C = MmaCfg<MI, BK>;
  constexpr int BM = C::BM, STAGE = C::STAGE, PITCH = C::PITCH, STAGES = C::STAGES;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int chunk = tid % C::CPR, lrow = tid / C::CPR;
  const int KT = (K + BK - 1) / BK;

#pragma unroll
  for (int mi = 0; mi < MI; mi++)
#pragma unroll
    for (int nj = 0; nj < 4; nj++)
#pragma unroll
      for (int c = 0; c < 4; c++) acc[mi][nj][c] = 0.f;

  auto load = [&](int stage, int kt) {
    const int k = kt * BK + chunk * 8;
    const bool kin = k < K;
    bf16_t* sA = smem + stage * STAGE;
    bf16_t* sB = sA + BM * PITCH;
#pragma unroll
    for (int i = 0; i < C::AP; i++) {
      const bool ok = kin && ap[i] != nullptr;
      cp_async16_fill(smem_u32(sA + (lrow + C::RPP * i) * PITCH + chunk * 8), ok ? (const void*)(ap[i] + k) : safe,
                 ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < C::BP; i++) {
      const bool ok = kin && bp[i] != nullptr;
      cp_async16_fill(smem_u32(sB + (lrow + C::RPP * i) * PITCH + chunk * 8), ok ? (const void*)(bp[i] + k) : safe,
                 ok ? 16 : 0);
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's part)
    __syncthreads();              // ... everyone's; and stage kt-1 is free
    {
      const int nk = kt + STAGES - 1;
      if (nk < KT) load(nk % STAGES, nk);
      cp_async_commit();  // possibly empty: keeps the group count uniform
    }
    const bf16_t* sA = smem + (kt % STAGES) * STAGE;
    const bf16_t* sB = sA + BM * PITCH;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned a[MI][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < MI; mi++) {
        const int r = wm * 16 * MI + mi * 16 + (lane & 15);
        const int c = kk + (lane >> 4) * 8;
        ldsm_x4(sA + r * PITCH + c, a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
      }
#pragma unroll
      for (int nj = 0; nj < 4; nj += 2) {
        const int r = wn * 32 + nj * 8 + (lane & 7) + ((lane >> 4) << 3);
        const int c = kk + ((lane >> 3) & 1) * 8;
        ldsm_x4(sB + r * PITCH + c, b[nj][0], b[nj][1], b[nj + 1][0], b[nj + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int nj = 0; nj < 4; nj++) mma_bf16(acc[mi][nj], a[mi], b[nj][0], b[nj][1]);
    }
  }
  cp_async_wait<0>();
}

// B row pointer for tile row b (0..127) of an output tile starting at
// column n0, w [N,K] (plain) or [2N,K] = [gate; up] (SwiGLU). SwiGLU tiles
// cover 64 output columns: warp wn's 32 B rows are gate rows wn*16+0..15
// then the up rows of the same columns, so each thread holds gate and up of
// the same output element (fragments nj and nj+2).
template <int SWIGLU>
__device__ __forceinline__ const bf16_t* mma_brow(const bf16_t* gate, const bf16_t* up, int N, int K, int n0, int b) {
  if constexpr (SWIGLU) {
    const int q = b & 31;
    const int col = n0 + (b >> 5) * 16 + (q & 15);
    if (col >= N) return nullptr;
    return (q < 16 ? gate : up) + (long long)col * K;
  } else {
    const int col = n0 + b;
    return col < N ? gate + (long long)col * K : nullptr;
  }
}

// Calls f(row, col, value) for every output element of this thread's
// fragments, tile-relative; with SWIGLU value is silu(gate) * up and col
// counts output columns (64 per tile).
template <int MI, int SWIGLU, typename F>
__device__ __forceinline__ void mma_epilogue(const float (&acc)[MI][4][4], F f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MI; mi++)
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const int row = wm * 16 * MI + mi * 16 + g + (c >> 1) * 8;
      if constexpr (SWIGLU) {
#pragma unroll
        for (int nj = 0; nj < 2; nj++)
          f(row, wn * 16 + nj * 8 + 2 * tq + (c & 1), silu_f(acc[mi][nj][c]) * acc[mi][nj + 2][c]);
      } else {
#pragma unroll
        for (int nj = 0; nj < 4; nj++) f(row, wn * 32 + nj * 8 + 2 * tq + (c & 1), acc[mi][nj][c]);
      }
    }
}

// y = x w^T on tensor cores: x [M,K], w [N,K] ([2N,K] with SWIGLU) bf16,
// y [M,N]; K a multiple of 8 and x, w 16-byte aligned. Grid: (M tiles, N
// tiles), so CTAs that run together share a weight tile in L2.
template <typename TY, int MI, int SWIGLU, int BK>
__global__ void __launch_bounds__(256) gemm_bf16(int M, int N, int K, const bf16_t* __restrict__ x,
                                                 const bf16_t* __restrict__ w, TY* __restrict__ y, int accumulate) {
  pdl_wait();
  extern __shared__ __align__(128) unsigned char mma_smem[];
  using C = MmaCfg<MI, BK>;
  constexpr int BN = SWIGLU ? 64 : MMA_BN;
  const int m0 = blockIdx.x * C::BM, n0 = blockIdx.y * BN;
  const bf16_t* ap[C::AP];
  const bf16_t* bp[C::BP];
#pragma unroll
  for (int i = 0; i < C::AP; i++) {
    const int r = m0 + mma_row<MI, BK>(i);
    ap[i] = r < M ? x + (long long)r * K : nullptr;
  }
  const bf16_t* up = w + (long long)N * K;  // only used with SWIGLU
#pragma unroll
  for (int i = 0; i < C::BP; i++) bp[i] = mma_brow<SWIGLU>(w, up, N, K, n0, mma_row<MI, BK>(i));
  float acc[MI][4][4];
  mma_tile<MI, BK>(acc, ap, bp, K, reinterpret_cast<bf16_t*>(mma_smem), w);
  mma_epilogue<MI, SWIGLU>(acc, [&](int r, int c, float v) {
    const int row = m0 + r, col = n0 + c;
    if (row < M && col < N) {
      const long long o = (long long)row * N + col;
      if (accumulate) v += to_f32(y[o]);
      y[o] = from_f32<TY>(v);
    }
  });
}

// ------------------------------------------------------------ gemm_simple

// y = x w^T for any dtypes and shapes: 64x64 output tiles, 256 threads of
// 4x4 outputs each (gate and up with SWIGLU), k in steps of 16 staged in
// shared memory as float. Each element sums k in order.
template <typename TX, typename TW, typename TY, int SWIGLU>
__global__ void __launch_bounds__(256) gemm_simple(int M, int N, int K, const TX* __restrict__ x,
                                                   const TW* __restrict__ w, TY* __restrict__ y, int accumulate) {
  pdl_wait();
  constexpr int NB = SWIGLU ? 2 : 1;
  __shared__ __align__(16) float As[16][68];      // [k][m]
  __shared__ __align__(16) float Bs[NB][16][68];  // [k][n]
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.x * 64, n0 = blockIdx.y * 64;
  float acc[NB][4][4];
#pragma unroll
  for (int q = 0; q < NB; q++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc[q][i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int e = tid + 256 * i, r = e >> 4, kk = e & 15, k = k0 + kk;
      const int m = m0 + r, n = n0 + r;
      As[kk][r] = (m < M && k < K) ? to_f32(x[(long long)m * K + k]) : 0.f;
#pragma unroll
      for (int q = 0; q < NB; q++) Bs[q][kk][r] = (n < N && k < K) ? to_f32(w[((long long)q * N + n) * K + k]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; kk++) {
      const float4 a = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
      for (int q = 0; q < NB; q++) {
        const float4 b = *reinterpret_cast<const float4*>(&Bs[q][kk][tx * 4]);
        const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc[q][i][j] = fmaf(av[i], bv[j], acc[q][i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
      if (m < M && n < N) {
        float v = SWIGLU ? silu_f(acc[0][i][j]) * acc[NB - 1][i][j] : acc[0][i][j];
        const long long o = (long long)m * N + n;
        if (accumulate) v += to_f32(y[o]);
        y[o] = from_f32<TY>(v);
      }
    }
}
