// rms_norm over the last axis: out[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)),
// as transformers' LagunaRMSNorm: float32 math, no "+1" on w. The weight w
// is float32 always (norm weights are tiny; the loader widens them). x and
// out may be different dtypes (Tx, To), e.g. an f32 residual stream feeding
// a bf16 GEMM, and may alias when they are the same buffer and dtype.
//
// Where n is a multiple of 8 and x, w and out are 16-byte aligned (the
// executor's arena and weights always are), a thread loads chunks of 8
// values with 16-byte loads, keeps them in registers for the second pass
// (NORM_CHUNKS per thread at most), and stores 8 at a time; otherwise it
// goes element by element and reads x twice. A thread writes only the
// elements it read, so out may alias x either way.
//
// The _q8x kernels also quantise each output row, as stored, into int8
// groups of 32 exactly as q8x_quantize (quant.cu) does: xq int8 [rows][n]
// and xs [rows][n/32] of (d, d*sum(q[0..16)), d*sum(q[16..32)), 0), n a
// multiple of 32, xq 8-byte and xs 16-byte aligned. A group's max and its
// integer half sums do not depend on the order they are combined in, and d
// and q come from the same expressions, so the bits are q8x_quantize's.
//
// The add_ kernels first form the residual sum s = a + b as add<Tx>
// (elementwise_ops.cu) does, store it to sum and normalise s: one launch
// for the add and the norm after it, with the bits of the two. sum may be
// a or b (each thread reads its elements before it stores them); out and
// xq lie apart from a, b and sum, which other rows' blocks still read.

#define NORM_CHUNKS 4

__device__ __forceinline__ float norm_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void norm_bf16x2(unsigned int u, float* o) {
  o[0] = __uint_as_float(u << 16);  // the element at the lower address
  o[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ unsigned int norm_pack(bf16_t a, bf16_t b) { return (unsigned int)a.bits | ((unsigned int)b.bits << 16); }
__device__ __forceinline__ unsigned int norm_pack(half_t a, half_t b) { return (unsigned int)a.bits | ((unsigned int)b.bits << 16); }

// norm_ld: *p, through L2 only (ld.cg) with CG: after a GEMV (norm_tail
// below), other blocks wrote the values and this SM's L1 may hold older
// lines of them.
template <bool CG, typename V> __device__ __forceinline__ V norm_ld(const V* p) {
  if constexpr (CG)
    return __ldcg(p);
  else
    return *p;
}
template <bool CG> __device__ __forceinline__ float norm_ld1(const float* p) { return norm_ld<CG>(p); }
template <bool CG, typename T> __device__ __forceinline__ float norm_ld1(const T* p) {  // bf16_t, half_t
  T v;
  v.bits = norm_ld<CG>(reinterpret_cast<const unsigned short*>(p));
  return to_f32(v);
}

// norm_load8 / norm_store8: 8 consecutive values at a 16-byte aligned p.
template <bool CG = false> __device__ __forceinline__ void norm_load8(const float* p, float* o) {
  float4 a = norm_ld<CG>(reinterpret_cast<const float4*>(p)), b = norm_ld<CG>(reinterpret_cast<const float4*>(p) + 1);
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
template <bool CG = false> __device__ __forceinline__ void norm_load8(const bf16_t* p, float* o) {
  uint4 u = norm_ld<CG>(reinterpret_cast<const uint4*>(p));
  norm_bf16x2(u.x, o);
  norm_bf16x2(u.y, o + 2);
  norm_bf16x2(u.z, o + 4);
  norm_bf16x2(u.w, o + 6);
}
template <bool CG = false> __device__ __forceinline__ void norm_load8(const half_t* p, float* o) {
#pragma unroll
  for (int e = 0; e < 8; e++) o[e] = norm_ld1<CG>(p + e);
}
__device__ __forceinline__ void norm_store8(float* p, const float* v) {
  float4 a, b;
  a.x = v[0], a.y = v[1], a.z = v[2], a.w = v[3], b.x = v[4], b.y = v[5], b.z = v[6], b.w = v[7];
  reinterpret_cast<float4*>(p)[0] = a;
  reinterpret_cast<float4*>(p)[1] = b;
}
template <typename T> __device__ __forceinline__ void norm_store8_16(T* p, const float* v) {
  uint4 u;
  u.x = norm_pack(from_f32<T>(v[0]), from_f32<T>(v[1]));
  u.y = norm_pack(from_f32<T>(v[2]), from_f32<T>(v[3]));
  u.z = norm_pack(from_f32<T>(v[4]), from_f32<T>(v[5]));
  u.w = norm_pack(from_f32<T>(v[6]), from_f32<T>(v[7]));
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void norm_store8(bf16_t* p, const float* v) { norm_store8_16(p, v); }
__device__ __forceinline__ void norm_store8(half_t* p, const float* v) { norm_store8_16(p, v); }

// norm_load8_any: norm_load8 where p is 16-byte aligned, else one by one
// (the same values).
template <bool CG = false, typename T> __device__ __forceinline__ void norm_load8_any(const T* p, float* o) {
  if (((unsigned long long)p & 15ull) == 0) {
    norm_load8<CG>(p, o);
  } else {
#pragma unroll
    for (int e = 0; e < 8; e++) o[e] = norm_ld1<CG>(p + e);
  }
}

__device__ __forceinline__ bool norm_aligned(const void* a, const void* b, const void* c) {
  return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15ull) == 0;
}

// norm_q8x quantises chunk c of a row, its 8 values v (has: the thread
// holds one), into int8 groups of 32 as q8x_quantize does: a group is the
// chunks of four consecutive lanes, which combine their max and the sums of
// their halves. Every lane of the warp calls it; a group's four lanes have
// chunks or none do.
__device__ __forceinline__ void norm_q8x(const float* v, bool has, int c, signed char* xq, float4* xs) {
  float amax = fabsf(v[0]);
#pragma unroll
  for (int e = 1; e < 8; e++) amax = fmaxf(amax, fabsf(v[e]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = amax / 127.f;
  unsigned int lo = 0, hi = 0;
  int s = 0;
#pragma unroll
  for (int e = 0; e < 8; e++) {
    const int q = amax > 0.f ? __float2int_rn(v[e] / d) : 0;
    s += q;
    const unsigned int b = (unsigned int)(unsigned char)(signed char)q;
    if (e < 4) lo |= b << (8 * e);
    else hi |= b << (8 * (e - 4));
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);  // this half's sum
  const int s16 = __shfl_xor_sync(0xffffffffu, s, 2);
  if (!has) return;
  *reinterpret_cast<uint2*>(xq + 8 * c) = make_uint2(lo, hi);
  if ((c & 3) == 0) xs[c >> 2] = make_float4(d, d * (float)s, d * (float)s16, 0.f);
}

// norm_out8 writes chunk c of a normed row (o: 8 values, has: c is in the
// row) and, with Q8, its int8 copy of the values as stored (norm_q8x: the
// whole warp takes part, has or not).
template <bool Q8, typename To>
__device__ __forceinline__ void norm_out8(const float (&o)[8], bool has, int c, To* out, signed char* xq, float4* xs) {
  if (has) norm_store8(out + 8 * c, o);
  if (Q8) {
    float st[8];
#pragma unroll
    for (int e = 0; e < 8; e++) st[e] = has ? to_f32(from_f32<To>(o[e])) : 0.f;
    norm_q8x(st, has, c, xq, xs);
  }
}

// norm_row normalises one row with `lanes` threads (a warp, or a block
// whose warps combine through red) of which this is thread `me`; with Q8
// it also quantises the row into xq, xs (the row's own).
template <typename Tx, typename To, bool BLOCK, bool Q8, bool ADD>
__device__ __forceinline__ void norm_row(int n, float eps, const Tx* xr, const float* __restrict__ w, To* orow, int me,
                                         int lanes, float* red, signed char* xq, float4* xs, const Tx* ar, const Tx* br,
                                         Tx* sr) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int nc = n >> 3;
  if (ADD) xr = sr;  // the path is the plain kernel's on x = sum: its bits
  bool vec = (n & 7) == 0 && nc <= NORM_CHUNKS * lanes && norm_aligned(xr, w, orow);
  float v[NORM_CHUNKS][8];
  float ss = 0.f;
  if (vec) {
#pragma unroll
    for (int i = 0; i < NORM_CHUNKS; i++) {
      int c = me + i * lanes;
      if (c < nc) {
        if (ADD) {  // add<Tx>'s sum, stored and then held as stored
          float vb[8];
          norm_load8_any(ar + 8 * c, v[i]);
          norm_load8_any(br + 8 * c, vb);
#pragma unroll
          for (int e = 0; e < 8; e++) v[i][e] = v[i][e] + vb[e];
          norm_store8(sr + 8 * c, v[i]);
#pragma unroll
          for (int e = 0; e < 8; e++) v[i][e] = to_f32(from_f32<Tx>(v[i][e]));
        } else {
          norm_load8(xr + 8 * c, v[i]);
        }
#pragma unroll
        for (int e = 0; e < 8; e++) ss += v[i][e] * v[i][e];
      }
    }
  } else {
    for (int c = me; c < n; c += lanes) {
      float x;
      if (ADD) {
        const Tx s = from_f32<Tx>(to_f32(ar[c]) + to_f32(br[c]));
        sr[c] = s;  // read back below by this thread
        x = to_f32(s);
      } else {
        x = to_f32(xr[c]);
      }
      ss += x * x;
    }
  }
  ss = norm_warp_sum(ss);  // also orders every read of the row before the writes
  if (BLOCK) {
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    ss = norm_warp_sum(lane < (lanes >> 5) ? red[lane] : 0.f);  // each warp sums the warps' sums
  }
  float inv = 1.f / sqrtf(ss / (float)n + eps);
  if (vec) {
#pragma unroll
    for (int i = 0; i < NORM_CHUNKS; i++) {
      int c = me + i * lanes;
      if (Q8 && i * lanes >= nc) break;  // no thread has chunk i: uniform
      bool has = c < nc;
      float o[8];
      if (has) {
        float wv[8];
        norm_load8(w + 8 * c, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = wv[e] * (v[i][e] * inv);
        norm_store8(orow + 8 * c, o);
      }
      if (Q8) {
        float st[8];  // the values as stored
#pragma unroll
        for (int e = 0; e < 8; e++) st[e] = has ? to_f32(from_f32<To>(o[e])) : 0.f;
        norm_q8x(st, has, c, xq, xs);
      }
    }
  } else {
    for (int c = me; c < n; c += lanes) orow[c] = from_f32<To>(w[c] * (to_f32(xr[c]) * inv));
    if (Q8) {  // quantise the row as stored, read back
      if (BLOCK) __syncthreads();
      else __syncwarp();
      for (int c0 = 0; c0 < nc; c0 += lanes) {
        int c = c0 + me;
        float st[8];
#pragma unroll
        for (int e = 0; e < 8; e++) st[e] = c < nc ? to_f32(orow[8 * c + e]) : 0.f;
        norm_q8x(st, c < nc, c, xq, xs);
      }
    }
  }
}

// One warp per row (short rows: per-head norms, small models). Block of
// blockDim.x threads handles blockDim.x/32 rows.
// With ADD, x is null and the rows are a + b, stored to sum.
template <typename Tx, typename To, bool Q8, bool ADD = false>
__device__ __forceinline__ void norm_warp_rows(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out,
                                               signed char* xq, float4* xs, const Tx* a = nullptr, const Tx* b = nullptr,
                                               Tx* sum = nullptr) {
  int warps = blockDim.x >> 5;
  int r = blockIdx.x * warps + (threadIdx.x >> 5);
  if (r >= rows) return;  // uniform per warp
  long long o = (long long)r * n;
  norm_row<Tx, To, false, Q8, ADD>(n, eps, ADD ? nullptr : x + o, w, out + o, threadIdx.x & 31, 32, nullptr,
                                   Q8 ? xq + o : nullptr, Q8 ? xs + (long long)r * (n >> 5) : nullptr,
                                   ADD ? a + o : nullptr, ADD ? b + o : nullptr, ADD ? sum + o : nullptr);
}

// One block per row (long rows: the hidden state; for one token, a single
// block whose threads each hold a 16-byte chunk).
template <typename Tx, typename To, bool Q8, bool ADD = false>
__device__ __forceinline__ void norm_block_rows(int rows, int n, float eps, const Tx* x, const float* __restrict__ w,
                                                To* out, signed char* xq, float4* xs, const Tx* a = nullptr,
                                                const Tx* b = nullptr, Tx* sum = nullptr) {
  __shared__ float red[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  long long o = (long long)r * n;
  norm_row<Tx, To, true, Q8, ADD>(n, eps, ADD ? nullptr : x + o, w, out + o, threadIdx.x, blockDim.x, red,
                                  Q8 ? xq + o : nullptr, Q8 ? xs + (long long)r * (n >> 5) : nullptr,
                                  ADD ? a + o : nullptr, ADD ? b + o : nullptr, ADD ? sum + o : nullptr);
}

template <typename Tx, typename To>
__global__ void rms_norm_warp(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out) {
  pdl_wait();
  norm_warp_rows<Tx, To, false>(rows, n, eps, x, w, out, nullptr, nullptr);
}

template <typename Tx, typename To>
__global__ void rms_norm_block(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out) {
  pdl_wait();
  norm_block_rows<Tx, To, false>(rows, n, eps, x, w, out, nullptr, nullptr);
}

template <typename Tx, typename To>
__global__ void rms_norm_warp_q8x(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out,
                                  signed char* __restrict__ xq, float4* __restrict__ xs) {
  pdl_wait();
  norm_warp_rows<Tx, To, true>(rows, n, eps, x, w, out, xq, xs);
}

// At most 64 registers a thread, so that a block of 1024 threads (rows of
// 8K values or more) can launch.
template <typename Tx, typename To>
__global__ void __launch_bounds__(1024) rms_norm_block_q8x(int rows, int n, float eps, const Tx* x, const float* __restrict__ w, To* out,
                                   signed char* __restrict__ xq, float4* __restrict__ xs) {
  pdl_wait();
  norm_block_rows<Tx, To, true>(rows, n, eps, x, w, out, xq, xs);
}

// The add_ variants: sum = a + b, then the norm of sum (see the top).
template <typename Tx, typename To>
__global__ void add_rms_norm_warp(int rows, int n, float eps, const Tx* a, const Tx* b, Tx* sum, const float* __restrict__ w,
                                  To* out) {
  pdl_wait();
  norm_warp_rows<Tx, To, false, true>(rows, n, eps, nullptr, w, out, nullptr, nullptr, a, b, sum);
}

template <typename Tx, typename To>
__global__ void __launch_bounds__(1024) add_rms_norm_block(int rows, int n, float eps, const Tx* a, const Tx* b, Tx* sum,
                                   const float* __restrict__ w, To* out) {
  pdl_wait();
  norm_block_rows<Tx, To, false, true>(rows, n, eps, nullptr, w, out, nullptr, nullptr, a, b, sum);
}

template <typename Tx, typename To>
__global__ void add_rms_norm_warp_q8x(int rows, int n, float eps, const Tx* a, const Tx* b, Tx* sum,
                                      const float* __restrict__ w, To* out, signed char* __restrict__ xq,
                                      float4* __restrict__ xs) {
  pdl_wait();
  norm_warp_rows<Tx, To, true, true>(rows, n, eps, nullptr, w, out, xq, xs, a, b, sum);
}

template <typename Tx, typename To>
__global__ void __launch_bounds__(1024) add_rms_norm_block_q8x(int rows, int n, float eps, const Tx* a, const Tx* b, Tx* sum,
                                       const float* __restrict__ w, To* out, signed char* __restrict__ xq,
                                       float4* __restrict__ xs) {
  pdl_wait();
  norm_block_rows<Tx, To, true, true>(rows, n, eps, nullptr, w, out, xq, xs, a, b, sum);
}

// --------------------------------------------- after a GEMV (quant.cu)
//
// norm_tail is one row's norm as a launch of `lanes` threads of the
// kernels above would compute it (lanes 32: the warp kernels), run by the
// last block of the GEMV that wrote its input (qgemv_norm), with the same
// bits. The block's warps stand in for the lanes' warps (warp w for w,
// w+warps, ...): each sums its squares in its lanes' order and the sums
// combine as norm_row's block combines them (for lanes 32 that adds
// zeros: the same sum). Outputs are element-wise and the quantised groups
// order-free, so the second pass takes the chunks in any order and reads
// the inputs again. x, a, b and sum are read through L2 (ld.cg): other
// blocks wrote them, and this SM's L1 may hold older lines of them.


// norm_tail_chunk is chunk c (8 values) of the row norm_tail normalises:
// x's, or with ADD a + b, stored to sum and rounded as sum holds it. JOIN
// (qgemv_join_norm): b's chunk is first replaced by b + js rounded to Tx
// (the accumulating store of the GEMV whose f32 sums js holds; b 16-byte
// aligned), and that value added.
template <typename Tx, bool ADD, bool JOIN = false>
__device__ __forceinline__ void norm_tail_chunk(int c, const Tx* x, const Tx* a, const Tx* b, Tx* sum, float (&v)[8],
                                                const float* js = nullptr) {
  if (ADD) {
    float vb[8];
    norm_load8_any<true>(a + 8 * c, v);
    norm_load8_any<true>(b + 8 * c, vb);
    if constexpr (JOIN) {
      float sv[8];
      norm_load8<true>(js + 8 * c, sv);
#pragma unroll
      for (int e = 0; e < 8; e++) vb[e] = to_f32(from_f32<Tx>(sv[e] + vb[e]));
      norm_store8(const_cast<Tx*>(b) + 8 * c, vb);
    }
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = v[e] + vb[e];
    norm_store8(sum + 8 * c, v);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = to_f32(from_f32<Tx>(v[e]));
  } else {
    norm_load8<true>(x + 8 * c, v);
  }
}

// norm_tail_one says whether norm_tail takes its one-load path (the
// inputs loaded once, at once) for a row of n at xr (sum with ADD, else
// x) in a block of warps warps. It restates norm_tail's two tests: written
// once (tried as functions and as macros, 2026-12-07), NVRTC 12.4
// compiled norm_tail's instantiations differently, so they stay twice;
// where the two disagree the JOIN path traps.
__device__ __forceinline__ bool norm_tail_one(int n, int lanes, int warps, const void* xr, const float* w, const void* out) {
  const int nc = n >> 3;
  return (n & 7) == 0 && nc <= NORM_CHUNKS * lanes && norm_aligned(xr, w, out) && nc <= lanes && (lanes >> 5) <= 2 * warps;
}

// JOIN: norm_tail_chunk's, on the one-load path only (the caller checks
// norm_tail_one).
template <typename Tx, typename To, bool Q8, bool ADD, bool JOIN = false>
__device__ __forceinline__ void norm_tail(int n, float eps, int lanes, const Tx* x, const float* __restrict__ w, To* out,
                                          signed char* xq, float4* xs, const Tx* a, const Tx* b, Tx* sum,
                                          const float* js = nullptr) {
  static_assert(!JOIN || ADD, "the join adds the row to a");
  __shared__ float red[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int nc = n >> 3;
  const Tx* xr = ADD ? sum : x;
  const bool vec = (n & 7) == 0 && nc <= NORM_CHUNKS * lanes && norm_aligned(xr, w, out);
  if (vec && nc <= lanes && (lanes >> 5) <= 2 * warps) {
    // One chunk a lane of each of at most two virtual warps a warp (S-2.1:
    // 3072 values, 384 lanes, 8 warps): the inputs and weights are loaded
    // once, at once, and kept, so the block waits for memory once rather
    // than for each virtual warp and again for the second pass. The chunks
    // and sums are those of the loops below (the same bits).
    float v[2][8], wv[2][8];
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int vw = warp + k * warps, c = 32 * vw + lane;
      if (vw < (lanes >> 5) && c < nc) {
        norm_tail_chunk<Tx, ADD, JOIN>(c, x, a, b, sum, v[k], js);
        norm_load8(w + 8 * c, wv[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int vw = warp + k * warps, c = 32 * vw + lane;
      if (vw < (lanes >> 5)) {  // uniform per warp
        float ss = 0.f;
        if (c < nc)
#pragma unroll
          for (int e = 0; e < 8; e++) ss += v[k][e] * v[k][e];
        ss = norm_warp_sum(ss);
        if (lane == 0) red[vw] = ss;
      }
    }
    __syncthreads();  // every read of the row (and sum's stores) before the writes
    const float ss = norm_warp_sum(lane < (lanes >> 5) ? red[lane] : 0.f);
    const float inv = 1.f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int vw = warp + k * warps, c = 32 * vw + lane;
      if (vw < (lanes >> 5)) {  // uniform per warp: norm_q8x's shuffles
        const bool has = c < nc;
        float o[8];
        if (has) {
#pragma unroll
          for (int e = 0; e < 8; e++) o[e] = wv[k][e] * (v[k][e] * inv);
        }
        norm_out8<Q8>(o, has, c, out, xq, xs);
      }
    }
    return;
  }
  if constexpr (JOIN) {
    __trap();  // the caller checks norm_tail_one: never here
    return;
  }
  for (int vw = warp; vw < (lanes >> 5); vw += warps) {  // uniform per warp
    const int me = 32 * vw + lane;
    float ss = 0.f;
    if (vec) {
#pragma unroll 1  // few registers: the GEMV's occupancy is the kernel's
      for (int i = 0; i < NORM_CHUNKS; i++) {
        int c = me + i * lanes;
        if (c < nc) {
          float v[8];
          norm_tail_chunk<Tx, ADD>(c, x, a, b, sum, v);
#pragma unroll
          for (int e = 0; e < 8; e++) ss += v[e] * v[e];
        }
      }
    } else {
      for (int c = me; c < n; c += lanes) {
        float xv;
        if (ADD) {
          const Tx s = from_f32<Tx>(norm_ld1<true>(a + c) + norm_ld1<true>(b + c));
          sum[c] = s;
          xv = to_f32(s);
        } else {
          xv = norm_ld1<true>(x + c);
        }
        ss += xv * xv;
      }
    }
    ss = norm_warp_sum(ss);
    if (lane == 0) red[vw] = ss;
  }
  __syncthreads();  // also orders every read of the row (and sum's stores) before the writes
  const float ss = norm_warp_sum(lane < (lanes >> 5) ? red[lane] : 0.f);
  const float inv = 1.f / sqrtf(ss / (float)n + eps);
  if (vec) {
    for (int c0 = 0; c0 < nc; c0 += blockDim.x) {  // uniform
      const int c = c0 + threadIdx.x;
      const bool has = c < nc;
      float o[8];
      if (has) {
        float v[8], wv[8];
        norm_load8<true>(xr + 8 * c, v);
        norm_load8(w + 8 * c, wv);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = wv[e] * (v[e] * inv);
      }
      norm_out8<Q8>(o, has, c, out, xq, xs);
    }
  } else {
    for (int c = threadIdx.x; c < n; c += blockDim.x) out[c] = from_f32<To>(w[c] * (norm_ld1<true>(xr + c) * inv));
    if (Q8) {
      __syncthreads();
      for (int c0 = 0; c0 < nc; c0 += blockDim.x) {
        const int c = c0 + threadIdx.x;
        float st[8];
#pragma unroll
        for (int e = 0; e < 8; e++) st[e] = c < nc ? norm_ld1<true>(out + 8 * c + e) : 0.f;
        norm_q8x(st, c < nc, c, xq, xs);
      }
    }
  }
}
