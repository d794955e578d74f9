// persist_qgemv_chain: dependent quantised GEMVs in one persistent launch,
// counters between them instead of launch boundaries (lower/persist.go;
// step 0 of docs/DECODE_MEGAKERNEL.md). Compiled after norm.cu and
// quant.cu: GEMV g's units are qgemv_xin's blocks, computed by qgemv_rows
// on x quantised as qgemv_xin quantises it, so y gets the launches' bits.

// One GEMV of the chain (lower.EncodePersistChain, 64 bytes).
struct PersistGEMV {
  int N, K, blocks, pad;
  long long rows, row0;
  const unsigned char* w;
  const bf16_t* x;
  bf16_t* y;
  long long pad2;
};

__device__ __forceinline__ unsigned persist_ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned persist_ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// persist_wait: the block waits until *c reaches target (compared modulo
// 2^32). Thread 0 polls with relaxed loads, then a fence makes it an
// acquire; a count that never comes (a block not resident, a wrong
// target) traps after about 2^26 polls rather than hanging the device.
__device__ __forceinline__ void persist_wait(const unsigned* c, unsigned target) {
  if (threadIdx.x == 0) {
    unsigned polls = 0;
    while ((int)(persist_ld_relaxed(c) - target) < 0) {
      if (++polls == (1u << 26)) __trap();
    }
    __threadfence();
  }
  __syncthreads();
}

// persist_prefetch_q8: the q8_0 rows [r, r + n) of w (rows x K, quant.cu's
// layout: quants, then f16 scales at align256(rows*K)) asked of L2 by the
// block's threads, 128-byte lines.
__device__ __forceinline__ void persist_prefetch_q8(const unsigned char* w, long long rows, long long r, int n, int K) {
  const unsigned char* qs = w + r * K;
  const unsigned char* sc = w + align256(rows * K) + r * (K / 32) * 2;
  const long long qb = (long long)n * K, sb = (long long)n * (K / 32) * 2;
  for (long long o = (long long)threadIdx.x * 128; o < qb; o += 128 * blockDim.x)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(qs + o));
  for (long long o = (long long)threadIdx.x * 128; o < sb; o += 128 * blockDim.x)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(sc + o));
}

// persist_signal: the block's stores so far are published, then n is added
// to *c (release): what cooperative groups' grid sync does on arrival.
__device__ __forceinline__ void persist_signal(unsigned* c, unsigned n) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(c), "r"(n) : "memory");
  }
}

// ctr[0] the epoch (launches completed), ctr[1] blocks arrived at the end,
// ctr[2 + g] GEMV g's units done. A block with no unit of GEMV g goes on to
// the next GEMV it has units of, waiting there on its predecessor. PRE
// (q8_0 only): the block asks L2 for its first unit's weights before it
// waits (they depend on nothing). Measured slower on the H200 than
// qgemv_xin launches with programmatic launch, in every form tried
// (docs/PERF.md, BenchmarkPersistBoundary), among them each storing warp
// counting itself done instead of its block (contention on the counter).
template <typename TY, int QT, int NW, int SPLIT, int PRE>
__global__ void __launch_bounds__(256, 2) persist_qgemv_chain(int G, const PersistGEMV* __restrict__ tab, unsigned* ctr) {
  pdl_wait();
  static_assert(!PRE || QT == QT_Q8_0, "the weight prefetch knows q8_0's layout only");
  __shared__ unsigned epoch;
  if (threadIdx.x == 0) epoch = persist_ld_acquire(ctr);
  __syncthreads();
  const unsigned E = epoch;
  for (int g = 0; g < G; g++) {
    const int blocks = tab[g].blocks;
    if ((int)blockIdx.x >= blocks) continue;
    const PersistGEMV e = tab[g];
    if (PRE) {
      constexpr int rows = (8 / SPLIT) * NW;  // a unit's weight rows
      const int r = blockIdx.x * rows;
      persist_prefetch_q8(e.w, e.rows, e.row0 + r, min(rows, e.N - r), e.K);
    }
    if (g > 0) persist_wait(ctr + 2 + g - 1, (E + 1) * (unsigned)tab[g - 1].blocks);
    // x through L2 (ld.global.cg): this SM's L1 may hold the last epoch's line.
    const QX xv = qgemv_xin_quant<1, true>(e.K, e.x);
    unsigned n = 0;
    for (int blk = blockIdx.x; blk < blocks; blk += gridDim.x, n++) {
      qgemv_rows<TY, QT, 1, 0, NW, SPLIT>(blk, e.N, e.K, e.rows, e.row0, e.w, xv, e.y, 0);
      __syncthreads();  // qgemv_rows' partial sums and x's copy are reused
    }
    persist_signal(ctr + 2 + g, n);
  }
  // The last block to arrive ends the epoch; the next launch starts after
  // this one completes, so no block of it reads the epoch before.
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(ctr + 1, 1u) == (E + 1) * gridDim.x - 1) atomicExch(ctr, E + 1);
}
