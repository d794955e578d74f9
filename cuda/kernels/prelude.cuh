// lagc kernel prelude: put in front of every kernel source by cuda.Compile.
// It needs no CUDA headers (NVRTC finds none by default), so the 16-bit
// float types and their conversions are spelled out here with PTX.
// Kernels load and store through to_f32/from_f32<T> and compute in float.

// LAGC_MINB(n): the blocks an SM the decode GEMVs ask of __launch_bounds__,
// n unless an experiment compiles them with -DLAGC_MINB_FORCE=m
// (LAGC_NVRTC_OPTIONS): more blocks an SM cap their registers, which
// leaves room beside them for the next launch's blocks (`lagc plan
// --resources`). n may be 0, no minimum (qgemv's default).
#ifdef LAGC_MINB_FORCE
#define LAGC_MINB(n) LAGC_MINB_FORCE
#else
#define LAGC_MINB(n) (n)
#endif

struct half_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

// Built-in arithmetic types convert with a C++ cast (integers from float
// round toward zero); the 16-bit float types have their own overloads.
template <typename T> __device__ __forceinline__ float to_f32(T x) { return (float)x; }
__device__ __forceinline__ float to_f32(half_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_f32(bf16_t x) {
  return __uint_as_float(((unsigned int)x.bits) << 16);
}

template <typename T> __device__ __forceinline__ T from_f32(float x) { return (T)x; }
template <> __device__ __forceinline__ half_t from_f32<half_t>(float x) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}
// bf16x2_bits: lo and hi rounded to bf16 as from_f32 rounds each, packed
// lo first (the lower address) for a 4-byte store.
__device__ __forceinline__ unsigned bf16x2_bits(float lo, float hi) {
  return (unsigned)from_f32<bf16_t>(lo).bits | ((unsigned)from_f32<bf16_t>(hi).bits << 16);
}

// pdl_wait: every kernel's first statement. A kernel launched with
// programmatic stream serialization (cuda.Stream.SetProgrammaticLaunch)
// may start while the kernel before it in the stream still runs (from when
// that one's blocks exit); this waits until that one has completed and its
// writes are visible, so what overlaps is the launch and block start-up.
// Without the launch attribute (and before sm_90) it returns at once.
// Measured and not kept (docs/PERF.md): launch_dependents at the start of
// every kernel together with the GEMVs prefetching their weights into L2
// before the wait made decode and prefill slower; launch_dependents right
// after this wait alone, in every kernel, too (q4_k_m, 48 layers: graph
// decode 245.2 -> 240.2 tok/s, eager 243.0 -> 232.3, prefill 2048 101.2 ->
// 102.8 ms).
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// pdl_trigger lets the launch after this one start before this one's
// blocks exit (griddepcontrol.launch_dependents, by every block): only for
// a launch whose work before its wait reads nothing this one writes
// (lower.XInPre's and lower.DownPre's pairs, which check that).
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// cp.async groups (sm_80 on): commit this thread's copies issued since the
// last commit as one group; wait until at most N of its groups are in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// 16- and 8-byte asynchronous copies from global to shared memory (sm_80
// on): they hold no registers while in flight. A thread's copies are
// visible to it after the wait for their group, to others after a barrier.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
// 16 bytes global -> shared, bypassing L1; bytes < 16 zero-fills the rest.
__device__ __forceinline__ void cp_async16_fill(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

// Tensor-core fragments (sm_80 on): four 8x8 b16 matrices from shared
// memory (each thread one row address: matrix lane/8, row lane%8), as they
// are or transposed, and D += A B in m16n8k16 bf16 with f32 accumulation.
__device__ __forceinline__ void ldsm_x4(const void* p, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(const void* p, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p))
               : "memory");
}
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats as bf16x2 in one instruction, lo at the lower address.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// last_block: whether this block is the last of n to arrive at *counter.
// Every thread of every block calls it once its writes are done. The
// barrier orders them before thread 0's fence, which publishes them
// (cumulatively: what the barrier ordered before it) before the block
// counts itself, as cooperative groups' grid sync does: one fence a block
// rather than one a thread, and acq_rel rather than __threadfence's sc
// (the release and acquire patterns need no more). The last block returns
// the counter to 0 (it is 0 before the launch: a replayed graph reuses it)
// and its thread 0 fences again before the barrier that lets the block
// read the others' writes, which it must read through L2 (ld.cg): its
// SM's L1 may hold older lines. The same answer in every thread.
__device__ __forceinline__ bool last_block(unsigned int* counter, unsigned int n) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");  // release: a fence and the strong write after it
    const bool l = atomicAdd(counter, 1u) == n - 1;
    if (l) {
      *counter = 0u;
      asm volatile("fence.acq_rel.gpu;" ::: "memory");  // acquire: after the strong read before it
    }
    last = l;
  }
  __syncthreads();
  return last;
}

// Grid-stride loop over n elements.
#define LAGC_FOR(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)

// Arg-max keys: ord_bits maps a float to unsigned bits in the float order
// (every NaN above +inf, -0 with +0 as they compare equal, every float
// above 0); ord_key(ord_bits(v), i) is then a 64-bit key whose unsigned
// maximum is the largest value and, among equal ones, the lowest index i,
// in any order of reduction. Key 0 is below every candidate.
__device__ __forceinline__ unsigned int ord_bits(float x) {
  if (x != x) return 0xffffffffu;
  unsigned int u = x == 0.f ? 0u : __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long ord_key(unsigned int ord, int i) {
  return ((unsigned long long)ord << 32) | (0xffffffffu - (unsigned int)i);
}
__device__ __forceinline__ int key_index(unsigned long long key) { return (int)(0xffffffffu - (unsigned int)key); }
__device__ __forceinline__ unsigned long long max_u64(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// warp_max_u64: the warp's maximum of a 64-bit value, the high words'
// maximum and then the low words' among the lanes that hold it (two
// redux.sync, sm_80 and up). All 32 lanes take part.
__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
  const unsigned int hi = (unsigned int)(v >> 32);
  const unsigned int mh = __reduce_max_sync(0xffffffffu, hi);
  const unsigned int ml = __reduce_max_sync(0xffffffffu, hi == mh ? (unsigned int)v : 0u);
  return ((unsigned long long)mh << 32) | ml;
}

// prmt is PTX's prmt.b32 for selectors whose nibbles all have bit 3
// clear: __byte_perm ignores that bit by definition, PRMT sign-extends
// on it, so NVRTC masks a __byte_perm selector it cannot prove clear
// (and moves constant ones into registers per use); iq4_lookup_raw's are.
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned s) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}

// iq4_lookup maps the 8 nibbles of q (4 bytes of IQ4_XS quants) through
// ggml's non-linear table kvalues_iq4nl: lo holds the low nibbles' int8
// values in byte order, hi the high nibbles'. Used by the decode GEMVs
// (quant.cu) and the prefill's wgmma GEMM (gemm_hopper.cu).
// BIAS: each value plus 128 as an unsigned byte (the sign bit flipped).
// iq4_lookup_raw leaves them interleaved, as the lookup makes them: r0
// holds [lo 0, hi 0, lo 1, hi 1], r1 [lo 2, hi 2, lo 3, hi 3] (the f16
// path takes its pairs from there, without iq4_lookup_t's two PRMTs).
template <bool BIAS = false> __device__ __forceinline__ void iq4_lookup_raw(unsigned q, unsigned& r0, unsigned& r1) {
  // kvalues_iq4nl as int8 bytes, entries 0-3, 4-7, 8-11, 12-15.
  constexpr unsigned int f = BIAS ? 0x80808080u : 0u;
  const unsigned int t0 = 0xBFAD9881u ^ f, t1 = 0xF6EADDCFu ^ f, t2 = 0x26190D01u ^ f, t3 = 0x71594535u ^ f;
  // A nibble's bits 0-2 index a half of the table, its bit 3 picks the
  // half (bit 2 of the final PRMT's selector, which reads the upper
  // half's lookup): both selectors made once a word, the high 16 bits
  // serving bytes 2 and 3.
  const unsigned int idx = q & 0x77777777u, pick = ((q >> 1) & 0x44444444u) | 0x32103210u;
  r0 = prmt(prmt(t0, t1, idx), prmt(t2, t3, idx), pick);
  r1 = prmt(prmt(t0, t1, idx >> 16), prmt(t2, t3, idx >> 16), pick >> 16);
}
template <bool BIAS = false> __device__ __forceinline__ void iq4_lookup_t(int q, int& lo, int& hi) {
  unsigned r0, r1;
  iq4_lookup_raw<BIAS>((unsigned)q, r0, r1);
  lo = (int)__byte_perm(r0, r1, 0x6420);
  hi = (int)__byte_perm(r0, r1, 0x7531);
}
__device__ __forceinline__ void iq4_lookup(int q, int& lo, int& hi) { iq4_lookup_t<false>(q, lo, hi); }

// SplitY: a GEMV's N columns sent to up to four outputs (qgemv_split,
// gemv_split), output i taking columns [end[i-1], end[i]) (end[-1] = 0,
// end[3] = N) as its own rows of that width: a batched decode step's q, k,
// v and gate. store writes row r's column c there.
template <typename TY> struct SplitY {
  TY* y[4];
  int end[3];
  __device__ __forceinline__ void store(int N, int r, int c, float v) const {
    const int i = c < end[0] ? 0 : c < end[1] ? 1 : c < end[2] ? 2 : 3;
    const int c0 = i == 0 ? 0 : end[i - 1], c1 = i == 3 ? N : end[i];
    y[i][(long long)r * (c1 - c0) + c - c0] = from_f32<TY>(v);
  }
};
