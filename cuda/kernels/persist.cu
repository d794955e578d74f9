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

// ------------------------------------------------------------ the ring
// persist_qgemv_ring is persist_qgemv_chain with each block's weights
// streamed ahead of its GEMVs into a ring of ns shared-memory slots (step
// 0c of docs/DECODE_MEGAKERNEL.md): a slot holds one unit's rows
// (qgemv_xin's block) laid out as quant.cu lays out a matrix of UR rows
// (bodies, then heads at a 256-byte boundary), copied by two
// cp.async.bulk and counted in by an mbarrier. Thread 0 fills the ring
// with the block's first ns units at the start, whatever GEMV they belong
// to (weights depend on nothing), and refills a slot with the unit ns
// further on as soon as the block is done with it, so that while the
// block waits for a GEMV's input, the next GEMVs' weights are already
// landing: what step 0's chain (weights asked after each wait, or only of
// L2) did not have. The sums are qgemv_rows's, reading the slot (SLd):
// the same code on the same bytes as the launches.
#define PERSIST_RING_MAX 32

// persist_unit_next: the block's unit after (g, blk) in its stream (every
// GEMV's units blockIdx.x, +gridDim.x, ...); g == G past the last.
__device__ __forceinline__ void persist_unit_next(int G, const PersistGEMV* __restrict__ tab, int& g, int& blk) {
  blk += gridDim.x;
  while (g < G && blk >= tab[g].blocks) {
    g++;
    blk = blockIdx.x;
  }
}

// The ring's pieces, shared by persist_qgemv_ring and persist_moe_pair.
// A slot is filled by one thread: ring_expect (its bytes, counted at the
// slot's mbarrier), then ring_copy for each run of rows; a unit j of a
// block's stream lies in slot j % ns at phase j / ns (ring_take).

// ring_init: ns mbarriers of one arrival each. By one thread.
__device__ __forceinline__ void ring_init(unsigned long long* full, int ns) {
  for (int s = 0; s < ns; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&full[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// ring_expect: the slot of mbarrier bar will receive bytes. The slot was
// last read by generic loads; the copies write it through the async proxy.
__device__ __forceinline__ void ring_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(bytes)
               : "memory");
}

// ring_copy: n rows of a matrix in quant.cu's layout (rows rows of bodies
// of body bytes, then its heads from align256(rows * body)) from row r
// into rows [d, d + n) of a slot laid out as a matrix of srows rows,
// counted at bar. lower has checked that every copy's place and size are
// multiples of 16 bytes.
__device__ __forceinline__ void ring_copy(const unsigned char* w, long long rows, long long r, int n, long long body, long long head,
                                          unsigned char* slot, int srows, int d, unsigned long long* bar) {
  const unsigned char* src[2] = {w + r * body, w + align256(rows * body) + r * head};
  unsigned char* dst[2] = {slot + d * body, slot + align256(srows * body) + d * head};
  const unsigned bytes[2] = {(unsigned)(n * body), (unsigned)(n * head)};
#pragma unroll
  for (int i = 0; i < 2; i++)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst[i])),
                 "l"(src[i]), "r"(bytes[i]), "r"((unsigned)__cvta_generic_to_shared(bar))
                 : "memory");
}

// ring_take: waits until unit j of the block's stream has landed and
// returns its slot. Traps after 2^22 polls (each try_wait may suspend a
// while: a second or more, where a slot's copy takes microseconds) rather
// than hanging on a copy that never lands.
__device__ __forceinline__ int ring_take(unsigned long long* full, int j, int ns) {
  const int s = j % ns;
  const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[s]), par = (unsigned)((j / ns) & 1);
  unsigned done = 0, polls = 0;
  do {
    if (++polls == (1u << 22)) __trap();
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(par)
                 : "memory");
  } while (!done);
  return s;
}

// persist_ring_issue: unit (g, blk) of UR rows into slot dst, counted at
// bar. By one thread.
template <int QT>
__device__ __forceinline__ void persist_ring_issue(const PersistGEMV& e, int blk, int UR, unsigned char* dst, unsigned long long* bar) {
  using Q = QW<QT>;
  const int nb = e.K / Q::BE, r0 = blk * UR, nr = min(UR, e.N - r0);
  const long long body = (long long)nb * Q::BODY, head = (long long)nb * Q::HEAD;
  ring_expect(bar, (unsigned)(nr * (body + head)));
  ring_copy(e.w, e.rows, e.row0 + r0, nr, body, head, dst, UR, 0, bar);
}

// ctr as persist_qgemv_chain's. Dynamic shared memory: x's quantised copy
// (qgemv_xin_quant, xoff bytes), then ns slots of slot bytes (lower.
// PersistRingLayout). One block an SM.
template <typename TY, int QT, int NW, int SPLIT>
__global__ void __launch_bounds__(256, 1) persist_qgemv_ring(int G, const PersistGEMV* __restrict__ tab, unsigned* ctr, int xoff,
                                                             int slot, int ns) {
  pdl_wait();
  extern __shared__ __align__(128) unsigned char persist_ring_smem[];
  __shared__ __align__(8) unsigned long long full[PERSIST_RING_MAX];
  __shared__ unsigned epoch;
  constexpr int UR = (8 / SPLIT) * NW;  // a unit's rows
  unsigned char* ring = persist_ring_smem + xoff;
  int ig = 0, iblk = blockIdx.x;  // thread 0: the next unit to copy
  if (threadIdx.x == 0) {
    epoch = persist_ld_acquire(ctr);
    ring_init(full, ns);
    while (ig < G && iblk >= tab[ig].blocks) ig++;  // the block's first unit
    for (int s = 0; s < ns && ig < G; s++) {
      persist_ring_issue<QT>(tab[ig], iblk, UR, ring + s * slot, &full[s]);
      persist_unit_next(G, tab, ig, iblk);
    }
  }
  __syncthreads();
  const unsigned E = epoch;
  int j = 0;  // the block's units consumed: unit j is in slot j % ns, phase j / ns
  for (int g = 0; g < G; g++) {
    const int blocks = tab[g].blocks;
    if ((int)blockIdx.x >= blocks) continue;
    const PersistGEMV e = tab[g];
    if (g > 0) persist_wait(ctr + 2 + g - 1, (E + 1) * (unsigned)tab[g - 1].blocks);
    const QX xv = qgemv_xin_quant<1, true>(e.K, e.x);
    unsigned n = 0;
    for (int blk = blockIdx.x; blk < blocks; blk += gridDim.x, n++, j++) {
      const int s = ring_take(full, j, ns);
      // the slot as a matrix of UR rows whose row 0 is the unit's first
      qgemv_rows<TY, QT, 1, 0, NW, SPLIT, false, false, 8, SLd>(blk, e.N, e.K, UR, -(long long)blk * UR, ring + s * slot, xv, e.y, 0);
      __syncthreads();  // the slot, the partial sums and x's copy are reused
      if (threadIdx.x == 0 && ig < G) {
        persist_ring_issue<QT>(tab[ig], iblk, UR, ring + s * slot, &full[s]);
        persist_unit_next(G, tab, ig, iblk);
      }
    }
    persist_signal(ctr + 2 + g, n);
  }
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(ctr + 1, 1u) == (E + 1) * gridDim.x - 1) atomicExch(ctr, E + 1);
}

// ------------------------------------------------------------ the routed pair
// persist_moe_pair is the routed experts of one decode token, QMoE's
// moe_gateup_qgemv then moe_down_qgemv (T = 1), as one persistent launch
// with the down's weights streamed while the gate+up runs (step 1a of
// docs/DECODE_MEGAKERNEL.md): every block's stream of units goes through
// one ring of ns slots filled by thread 0 as persist_qgemv_ring's is. A
// gate+up group (32 consecutive i of one route, a group of the quantised
// activations) is four sub-units of 8 i: a slot holds their 8 gate rows
// and 8 up rows as a matrix of 16 rows, warp w summing i = 8q + w; once
// the four are summed, warp 0 quantises the group. Then a counter: every
// group of every block done. A down unit is 8 rows h of every route: a
// slot holds route j's rows as rows 8j..8j+7 of a matrix of 8k rows, warp
// w summing h = 8hb + w over the routes. Each row's sum is the launches'
// (moe_gateup_body: a lane's units one at a time; moe_down_body: the
// routes' units as one sequence, fmaf with the route's weight), read
// through QW<QT>::load from the slot: the same bits. ctr: the blocks
// arrived at the end, the gate+up groups done; zero before the launch, and
// the last block to arrive leaves them zero (every block has passed its
// wait by then), so a plan's sync bytes serve (lower.BaseSync). Once every
// group is done, the launch after it may start (its blocks beside the
// down's: qgemv_xin_norm_pre, as after moe_down_qgemv_pre). Dynamic shared
// memory: x quantised (int8 [H], scales [H/32]), the routes' activations
// (int8 [k I], scales [k I/32]), then from xoff the ring. One block an SM.
#define PM_SUB 8  // i of a gate+up sub-unit, h of a down unit: a warp each

// A block's place in its stream of units: sub-unit q of group g while
// g < G (groups of an invalid route skipped), then down unit hb; done
// (pm_more false) once g has reached G and hb H / PM_SUB (a block may
// have units of one phase only).
struct PMCursor {
  int g, q, hb;
};

__device__ __forceinline__ void pm_settle(PMCursor& c, int G, int gpr, const int* se) {
  while (c.g < G && se[c.g / gpr] < 0) c.g += gridDim.x;
}

__device__ __forceinline__ bool pm_more(const PMCursor& c, int G, int nh) { return c.g < G || c.hb < nh; }

__device__ __forceinline__ void pm_next(PMCursor& c, int G, int gpr, const int* se) {
  if (c.g < G) {
    if (++c.q == 4) {
      c.q = 0;
      c.g += gridDim.x;
      pm_settle(c, G, gpr, se);
    }
  } else {
    c.hb += gridDim.x;
  }
}

// pm_issue: the unit at c into slot, counted at bar; nvalid: the routes
// with a valid expert. By one thread.
template <int QT, int QTD>
__device__ __forceinline__ void pm_issue(const PMCursor& c, int k, int H, int I, int G, const int* se, int nvalid,
                                         const unsigned char* gate, long long gate_rows, long long gate_row0, const unsigned char* up,
                                         long long up_rows, long long up_row0, const unsigned char* down, long long down_rows,
                                         long long down_row0, unsigned char* slot, unsigned long long* bar) {
  using Q = QW<QT>;
  using QD = QW<QTD>;
  if (c.g < G) {
    const int gpr = I / 32, r = c.g / gpr, i0 = (c.g - r * gpr) * 32 + PM_SUB * c.q;
    const long long body = (long long)(H / Q::BE) * Q::BODY, head = (long long)(H / Q::BE) * Q::HEAD, e = se[r];
    ring_expect(bar, (unsigned)(2 * PM_SUB * (body + head)));
    ring_copy(gate, gate_rows, gate_row0 + e * I + i0, PM_SUB, body, head, slot, 2 * PM_SUB, 0, bar);
    ring_copy(up, up_rows, up_row0 + e * I + i0, PM_SUB, body, head, slot, 2 * PM_SUB, PM_SUB, bar);
  } else {
    const long long body = (long long)(I / QD::BE) * QD::BODY, head = (long long)(I / QD::BE) * QD::HEAD;
    ring_expect(bar, (unsigned)(nvalid * PM_SUB * (body + head)));
    for (int j = 0; j < k; j++)
      if (se[j] >= 0)
        ring_copy(down, down_rows, down_row0 + (long long)se[j] * H + PM_SUB * c.hb, PM_SUB, body, head, slot, PM_SUB * k, PM_SUB * j,
                  bar);
  }
}

template <typename TY, int QT, int QTD>
__global__ void __launch_bounds__(256, 1)
    persist_moe_pair(int k, int H, int I, int E, const signed char* __restrict__ xqg, const float4* __restrict__ xsg,
                     const int* __restrict__ ids, const float* __restrict__ weights, const unsigned char* __restrict__ gate,
                     long long gate_rows, long long gate_row0, const unsigned char* __restrict__ up, long long up_rows,
                     long long up_row0, const unsigned char* __restrict__ down, long long down_rows, long long down_row0,
                     signed char* aq, float4* as, TY* __restrict__ out, int accumulate, unsigned* ctr, int xoff, int slot, int ns) {
  pdl_wait();
  using Q = QW<QT>;
  using QD = QW<QTD>;
  extern __shared__ __align__(128) unsigned char persist_ring_smem[];
  __shared__ __align__(8) unsigned long long full[PERSIST_RING_MAX];
  __shared__ int se[QMOE_MAX_K];  // route j's expert, -1 for an invalid id
  __shared__ float sw[QMOE_MAX_K];
  __shared__ float sums[2][32];  // a group's gate and up sums
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gpr = I / 32, G = k * gpr, nh = H / PM_SUB, U = H / 32, UI = I / 32;
  signed char* xq = reinterpret_cast<signed char*>(persist_ring_smem);
  float4* xs = reinterpret_cast<float4*>(xq + H);
  signed char* aqs = reinterpret_cast<signed char*>(xs + U);
  float4* ass = reinterpret_cast<float4*>(aqs + k * I);
  unsigned char* ring = persist_ring_smem + xoff;
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    const int e = __ldcg(ids + j);
    se[j] = e >= 0 && e < E ? e : -1;
    sw[j] = __ldcg(weights + j);
  }
  for (int i = threadIdx.x; i < H / 16; i += blockDim.x) reinterpret_cast<int4*>(xq)[i] = __ldcg(reinterpret_cast<const int4*>(xqg) + i);
  for (int i = threadIdx.x; i < U; i += blockDim.x) xs[i] = __ldcg(xsg + i);
  __syncthreads();
  PMCursor ic{(int)blockIdx.x, 0, (int)blockIdx.x};  // thread 0: the next unit to copy
  int nvalid = 0;                                    // thread 0: the routes with a valid expert
  // thread 0, while the stream has units: the next into slot s
  auto issue = [&](int s) {
    if (pm_more(ic, G, nh)) {
      pm_issue<QT, QTD>(ic, k, H, I, G, se, nvalid, gate, gate_rows, gate_row0, up, up_rows, up_row0, down, down_rows, down_row0,
                        ring + s * slot, &full[s]);
      pm_next(ic, G, gpr, se);
    }
  };
  if (threadIdx.x == 0) {
    for (int r = 0; r < k; r++) nvalid += se[r] >= 0;
    ring_init(full, ns);
    pm_settle(ic, G, gpr, se);
    for (int s = 0; s < ns; s++) issue(s);
  }
  __syncthreads();
  int j = 0;  // units consumed (ring_take)
  const QX xv{xq, xs, H};
  unsigned groups = 0;
  for (int g = blockIdx.x; g < G; g += gridDim.x, groups++) {
    const int r = g / gpr;
    const long long o = (long long)r * I + (g - r * gpr) * 32;
    if (se[r] < 0) {  // as moe_gateup_body: a zero group
      if (warp == 0) {
        aq[o + lane] = 0;
        if (lane == 0) as[o / 32] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
      continue;
    }
    for (int q = 0; q < 4; q++, j++) {
      const int s = ring_take(full, j, ns);
      const unsigned char* sl = ring + s * slot;
      float ag = 0.f, au = 0.f;
      for (int u = lane; u < U; u += 32) {
        const typename Q::X x = Q::xload(xv, 0, u);
        ag += Q::dot(Q::template load<SLd>(sl, 2 * PM_SUB, warp, H, u), x, u);
        au += Q::dot(Q::template load<SLd>(sl, 2 * PM_SUB, PM_SUB + warp, H, u), x, u);
      }
      ag = warp_sum_q(ag);
      au = warp_sum_q(au);
      if (lane == 0) {
        sums[0][PM_SUB * q + warp] = ag;
        sums[1][PM_SUB * q + warp] = au;
      }
      __syncthreads();  // the slot read, the sums written
      if (threadIdx.x == 0) issue(s);
    }
    if (warp == 0) {
      float4 sc;
      aq[o + lane] = (signed char)q8x_group(silu_q(sums[0][lane]) * sums[1][lane], sc);
      if (lane == 0) as[o / 32] = sc;
    }
    __syncthreads();  // the sums read before the next group's
  }
  persist_signal(ctr + 1, groups);
  // the down: every group of every block quantised
  persist_wait(ctr + 1, (unsigned)G);
  pdl_trigger();
  for (int i = threadIdx.x; i < k * I / 16; i += blockDim.x) reinterpret_cast<int4*>(aqs)[i] = __ldcg(reinterpret_cast<const int4*>(aq) + i);
  for (int i = threadIdx.x; i < k * UI; i += blockDim.x) ass[i] = __ldcg(as + i);
  __syncthreads();
  for (int hb = blockIdx.x; hb < nh; hb += gridDim.x, j++) {
    const int s = ring_take(full, j, ns);
    const unsigned char* sl = ring + s * slot;
    float acc = 0.f;
    for (int v = lane; v < k * UI; v += 32) {
      const int jr = v / UI, u = v - jr * UI;
      if (se[jr] >= 0) {
        const typename QD::X x = QD::xload(QX{aqs + jr * I, ass + jr * UI, I}, 0, u);
        acc = fmaf(sw[jr], QD::dot(QD::template load<SLd>(sl, PM_SUB * k, PM_SUB * jr + warp, I, u), x, u), acc);
      }
    }
    const float sum = warp_sum_q(acc);
    if (lane == 0) {
      const int h = PM_SUB * hb + warp;
      float v = sum;
      if (accumulate) v += to_f32(out[h]);
      out[h] = from_f32<TY>(v);
    }
    __syncthreads();  // the slot read
    if (threadIdx.x == 0) issue(s);
  }
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(ctr, 1u) == gridDim.x - 1) {
    atomicExch(ctr + 1, 0u);
    atomicExch(ctr, 0u);
  }
}
