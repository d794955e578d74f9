// Run on the H200: nvcc -O3 -arch=sm_90a -o /tmp/gemvchain scripts/probes/gemv-chain.cu && /tmp/gemvchain 48 && /tmp/gemvchain 48 norm && /tmp/gemvchain 48 noroute && /tmp/gemvchain 48 q4k
// (docs/DECODE_MEGAKERNEL.md, "Step 0b"). Not part of lagc; no Go code reads it.
//
// The question: can a chain of dependent GEMVs of a decode layer's sizes
// stream its weights at close to the DRAM rate if each multiprocessor's
// weights keep arriving through a shared-memory ring while its consumers
// wait for the previous GEMV (one persistent kernel, counters between
// GEMVs), where lagc's launches (one a GEMV, programmatic launch) reach
// about 40% of the byte roofline? Step 0 compared counters with launches
// without such a ring and found counters 1 us a GEMV slower.
//
// A "layer" is seven int8 GEMVs (y = s * W x, W [N, K] row-major, x the
// first K values of the previous y, f32) of about a q4_k_m MoE layer's
// bytes: q,k,v,gate 11264x3072, an attention stand-in 9216x512, o_proj
// 3072x9216, router and shared gate+up 2304x3072, routed gate+up
// 15360x2304, routed down 3072x5760, shared down 3072x1024: 129 MB. 48
// layers, every weight distinct (6.2 GB read, far above L2). The routed
// gate+up's rows are 10 experts of 1536 chosen from a stack of 256 (906
// MB, shared by the layers) by the top-10 of the router GEMV's first 256
// outputs, so the ring's producer, like a real one, cannot stream them
// before the router is done (`noroute`: fixed rows, as the others').
// `q4k`: the two routed GEMVs as S-2.1's in a q4_k_m file, q4_k blocks
// (ggml's layout, scales unpacked a unit as llama.cpp does) against x
// quantised to int8 in every block (lagc's qgemv_xin): gate+up 10 of 256
// experts of 2048x3072 from o_proj's y, picked by the router's; the down
// over the ten experts' 1024 inputs as one 3072x10240 GEMV (131 MB a
// layer). That is the consumers' real work a byte: what decides whether
// 8 consumer warps keep up with the ring.
//
//   launch  each GEMV a launch: griddepcontrol.wait first (pdl) or not
//           (plain), all 336 captured in one graph
//   pre     pdl, and each launch issues its first weight loads before the
//           wait, triggering its dependents at its start
//   ring S  one persistent kernel, a block a multiprocessor: a producer
//           warp bulk-copies the block's rows of every GEMV in turn into a
//           ring of S 9 KB slots (16 or 8), never waiting for a GEMV; 8
//           consumer warps, each with its own slots (chunk j to warp j % 8),
//           wait for the previous GEMV's counter, read x from L2, and sum
//           their chunks' rows as they land, no block barrier a chunk;
//           "nodep": no waits (timing only), the ring's streaming alone;
//           "8 x2": two blocks of 8 slots an SM, where they fit
//   read    every weight byte once, the ceiling
// Prints us a layer, TB/s over the weights, and the largest relative
// difference of the last y between each form and `launch plain`.
//
// Compile-time forms (docs/PERF.md "2026-12-07 (from 17:38 UTC)"), each
// in every launch and ring form alike: -DDP4A=1 int8 GEMVs sum with dp4a
// against x quantised in every block (q8_0's way) rather than int8 x f32;
// -DQX_FAST=1 quantises x four groups a warp at once (the same values);
// -DQ4K_PERM=1 unpacks q4_k's scales and mins by byte permutes (the same
// values); -DCWARPS=16, -DRB=4 as below. Plain's last y's sum of |y| is
// printed so that builds can be compared.
#ifndef __CUDACC_RTC__  // NVRTC (a syntax check off the GPU machine) sees the kernels only
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cmath>
#endif

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

struct Gemv {
  const unsigned char* w;
  int N, K;
  int type;        // 0: int8 rows of K bytes; 1: q4_k rows of K/256 blocks of 144 bytes (ggml's layout)
  float scale;
  int norm;        // 1: y = scale * W x / rms(x), rms over x's K values, as a norm before the GEMV
  const float* x;  // an earlier y (or the input)
  const float* route;  // erows > 0: the y whose first 256 values pick the experts
  float* y;
  int erows;       // > 0: w is a stack of 256 experts of erows rows; the N = k*erows rows are
                   // those of the top-k of route[0, 256) (ties to the lower index), best first
};

__host__ __device__ __forceinline__ int row_bytes(const Gemv& g) { return g.type ? g.K / 256 * 144 : g.K; }

#define ROUTE_MAX 16

#ifndef DP4A
#define DP4A 0  // -DDP4A=1: int8 GEMVs quantise x to int8 in every block and sum with dp4a (q8_0's way), not int8 x f32
#endif

// x_quantised: whether a GEMV of this type reads x quantised (q4_k always;
// int8 with DP4A); xq_bytes: the int8 values and a float4 a group of 32.
__host__ __device__ __forceinline__ bool x_quantised(int type) { return type != 0 || DP4A; }
__host__ __device__ __forceinline__ int xq_bytes(int K) { return K + K / 32 * 16; }

// topk_warp: a warp's choice of the k largest of v[0, 256) (v in shared
// or global memory, read through ld): expert ids best first into ids
// (lane j writes ids[j]).
template <typename LD>
__device__ __forceinline__ void topk_warp(LD ld, int k, int* ids) {
  const int lane = threadIdx.x & 31;
  unsigned long long key[8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int e = lane + 32 * i;
    unsigned b = __float_as_uint(ld(e));
    b = (b & 0x80000000u) ? ~b : b | 0x80000000u;  // order-preserving
    key[i] = ((unsigned long long)b << 32) | (unsigned)(255 - e);
  }
  for (int j = 0; j < k; j++) {
    unsigned long long m = key[0];
#pragma unroll
    for (int i = 1; i < 8; i++) m = max(m, key[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int e = 255 - (int)(m & 0xffffffffu);
#pragma unroll
    for (int i = 0; i < 8; i++)
      if (lane + 32 * i == e) key[i] = 0ull;
    if (lane == j) ids[j] = e;
  }
}

// The stack row of the GEMV's row r.
__device__ __forceinline__ long long weight_row(const Gemv& g, const int* ids, int r) {
  return g.erows ? (long long)ids[r / g.erows] * g.erows + r % g.erows : r;
}

__device__ __forceinline__ unsigned su32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ float dot16(int4 w, const float* x) {  // 16 int8 weights and their x
  const signed char* b = reinterpret_cast<const signed char*>(&w);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 16; i++) s += (float)b[i] * x[i];
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 1 / rms of K values whose squares' nw warp sums are in red.
__device__ __forceinline__ float rms_inv(const float* red, int nw, int K) {
  float t = 0.f;
  for (int i = 0; i < nw; i++) t += red[i];
  return rsqrtf(t / (float)K + 1e-6f);
}

// ---------------------------------------------------------------- q4_k
// A q4_k block (ggml's layout, 144 bytes for 256 weights): f16 d, f16
// dmin, 12 bytes of 6-bit scales and mins for its 8 sub-blocks of 32, 128
// bytes of nibbles (32-byte chunk j: sub-block 2j low, 2j+1 high). The
// probe's weights are random bytes, so d and dmin keep only the mantissa
// and a fixed exponent (values in [0.125, 0.25): no NaN, no denormal).
// x is quantised as lagc's qgemv_xin does it: int8 a value and, a group of
// 32, (d, d*sum(q[0,16)), d*sum(q[16,32)), 0). Unit u of a row (lagc's
// QWK45 unit) is half h of chunk j of block b: 16 nibble bytes, 32 weights.

__device__ __forceinline__ float q4k_f16(unsigned bits) {  // the f16 0x3000 | (bits & 0x3FF)
  return (float)(1024u + (bits & 0x3FFu)) * (1.f / 8192.f);
}

__device__ __forceinline__ unsigned byte_of(uint4 v, int i) {  // byte i (0..15) of v, no local memory
  const unsigned w = i < 8 ? (i < 4 ? v.x : v.y) : (i < 12 ? v.z : v.w);
  return (w >> (8 * (i & 3))) & 0xFFu;
}

#ifndef Q4K_PERM
#define Q4K_PERM 0  // -DQ4K_PERM=1: q4k_unit's scales and mins by byte permutes, no branch on j
#endif

// q4k_scales_perm: sub-blocks 2j and 2j + 1's 6-bit scales and mins (as
// the branchy form below computes them), from two byte permutes whose
// selectors depend on j alone (lane-constant in the loops), and the
// high-bit form chosen by selects rather than a divergent branch
// (scripts/probes/q4k-perm-check.py checks the formula against ggml's).
__device__ __forceinline__ void q4k_scales_perm(uint4 hdr, int j, unsigned& sc0, unsigned& m0, unsigned& sc1, unsigned& m1) {
  // j < 2 (s = 2j, 2j + 1 < 4): sc = byte 4 + s, m = byte 8 + s (hdr.y, hdr.z bytes s).
  // j >= 2 (t = s - 4): sc = (byte 8 + s & 15) | (byte s >> 6) << 4 (hdr.w, hdr.y bytes t),
  //                     m = (byte 8 + s >> 4) | (byte 4 + s >> 6) << 4 (hdr.w, hdr.z bytes t).
  const unsigned t = 2u * (unsigned)(j & 1);
  const unsigned lo = __byte_perm(hdr.y, hdr.z, t | (t + 1) << 4 | (t + 4) << 8 | (t + 5) << 12);  // y.t y.t1 z.t z.t1
  const unsigned hi = __byte_perm(hdr.w, 0u, t | (t + 1) << 4);                                    // w.t w.t1
  if (j < 2) {  // lane-constant; both sides are a few selects' worth
    sc0 = lo & 63u;
    sc1 = (lo >> 8) & 63u;
    m0 = (lo >> 16) & 63u;
    m1 = (lo >> 24) & 63u;
  } else {
    sc0 = (hi & 15u) | ((lo >> 6) & 3u) << 4;
    sc1 = ((hi >> 8) & 15u) | ((lo >> 14) & 3u) << 4;
    m0 = ((hi >> 4) & 15u) | ((lo >> 22) & 3u) << 4;
    m1 = ((hi >> 12) & 15u) | ((lo >> 30) & 3u) << 4;
  }
}

// q4k_unit: unit u's product with x, from its block's 16 header bytes and
// its 16 nibble bytes.
__device__ __forceinline__ float q4k_unit(uint4 hdr, uint4 q, const signed char* xq, const float4* xs, int u) {
  const int b = u >> 3, j = (u >> 1) & 3, h = u & 1;
  const int e = b * 256 + 64 * j + 16 * h;
  unsigned sc0, m0, sc1, m1;
#if Q4K_PERM
  q4k_scales_perm(hdr, j, sc0, m0, sc1, m1);
#else
  // sub-blocks s0 = 2j, s1 = 2j + 1; scales byte k is byte 4 + k of hdr (ggml's get_scale_min_k4)
  const int s0 = 2 * j, s1 = 2 * j + 1;
  if (j < 2) {
    sc0 = byte_of(hdr, 4 + s0) & 63u;
    m0 = byte_of(hdr, 8 + s0) & 63u;
    sc1 = byte_of(hdr, 4 + s1) & 63u;
    m1 = byte_of(hdr, 8 + s1) & 63u;
  } else {
    sc0 = (byte_of(hdr, 8 + s0) & 15u) | ((byte_of(hdr, s0) >> 6) << 4);
    m0 = (byte_of(hdr, 8 + s0) >> 4) | ((byte_of(hdr, 4 + s0) >> 6) << 4);
    sc1 = (byte_of(hdr, 8 + s1) & 15u) | ((byte_of(hdr, s1) >> 6) << 4);
    m1 = (byte_of(hdr, 8 + s1) >> 4) | ((byte_of(hdr, 4 + s1) >> 6) << 4);
  }
#endif
  const int4 xl = *reinterpret_cast<const int4*>(xq + e), xh = *reinterpret_cast<const int4*>(xq + e + 32);
  const float4 sa = xs[e / 32], sb = xs[e / 32 + 1];
  const int raw[4] = {(int)q.x, (int)q.y, (int)q.z, (int)q.w};
  const int xlv[4] = {xl.x, xl.y, xl.z, xl.w}, xhv[4] = {xh.x, xh.y, xh.z, xh.w};
  int dl = 0, dh = 0;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    dl = __dp4a(raw[i] & 0x0F0F0F0F, xlv[i], dl);
    dh = __dp4a((raw[i] >> 4) & 0x0F0F0F0F, xhv[i], dh);
  }
  const float d = q4k_f16(hdr.x), dmin = q4k_f16(hdr.x >> 16);
  return d * ((float)sc0 * sa.x * (float)dl + (float)sc1 * sb.x * (float)dh) -
         dmin * ((float)m0 * (h ? sa.z : sa.y) + (float)m1 * (h ? sb.z : sb.y));
}

#ifndef QX_FAST
#define QX_FAST 0  // -DQX_FAST=1: quantise_x four groups a warp at once (8 lanes a group, 4 values a lane)
#endif

// quantise_x: x's K values (f32, shared) into xq and xs (shared), a group of
// 32 a warp at a time (lane i value i); warps w of nw. QX_FAST: the same
// values, four groups a warp at a time, 7 dependent shuffles a round where
// the first form takes 15 a group (12 groups a warp at K 3072 and 8 warps:
// a serial prologue of every GEMV in every block).
__device__ __forceinline__ void quantise_x(const float* x, signed char* xq, float4* xs, int K, int w, int nw) {
  const int lane = threadIdx.x & 31;
#if QX_FAST
  const int sub = lane >> 3, l8 = lane & 7;
  for (int g0 = 4 * w; g0 < K / 32; g0 += 4 * nw) {
    const int g = g0 + sub;
    const bool has = g < K / 32;  // K % 128 need not be 0: a quarter may have no group
    const float4 v = has ? reinterpret_cast<const float4*>(x + 32 * g)[l8] : make_float4(0.f, 0.f, 0.f, 0.f);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.f;
    const int q0 = d > 0.f ? __float2int_rn(v.x / d) : 0, q1 = d > 0.f ? __float2int_rn(v.y / d) : 0;
    const int q2 = d > 0.f ? __float2int_rn(v.z / d) : 0, q3 = d > 0.f ? __float2int_rn(v.w / d) : 0;
    if (has)
      reinterpret_cast<char4*>(xq + 32 * g)[l8] = make_char4((signed char)q0, (signed char)q1, (signed char)q2, (signed char)q3);
    int s = q0 + q1 + q2 + q3;  // lanes 0-3 of the group: values 0-15, lanes 4-7: 16-31
#pragma unroll
    for (int o = 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const int hi = __shfl_down_sync(0xffffffffu, s, 4);
    if (has && l8 == 0) xs[g] = make_float4(d, d * (float)s, d * (float)hi, 0.f);
  }
#else
  for (int g = w; g < K / 32; g += nw) {
    const float v = x[32 * g + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.f;
    const int q = d > 0.f ? __float2int_rn(v / d) : 0;
    xq[32 * g + lane] = (signed char)q;
    int lo = lane < 16 ? q : 0, hi = lane < 16 ? 0 : q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo += __shfl_xor_sync(0xffffffffu, lo, o);
      hi += __shfl_xor_sync(0xffffffffu, hi, o);
    }
    if (lane == 0) xs[g] = make_float4(d, d * (float)lo, d * (float)hi, 0.f);
  }
#endif
}

__global__ void fill(signed char* w, long long n, unsigned seed) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) * 97u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    w[i] = (signed char)((int)(h % 255u) - 127);
  }
}

// ---------------------------------------------------------------- launches
// A warp a row pair, lane-strided pieces (T 0: 16 bytes; T 1: a q4_k unit,
// its 16 nibble bytes and its block's 16 header bytes), U pieces of each
// row in flight, x staged in shared memory (from L2) after the wait (and,
// T 1, quantised there); 8 warps, 16 rows a block. PRE: the first round's
// weights before griddepcontrol.wait, and launch_dependents at the start.
struct Piece {
  uint4 q, hdr;  // T 0: q the 16 int8 weights
};

template <int T>
__device__ __forceinline__ Piece load_piece(const unsigned char* row, int p) {
  if (T == 0) return Piece{__ldcs(reinterpret_cast<const uint4*>(row) + p), make_uint4(0, 0, 0, 0)};
  const int b = p >> 3, j = (p >> 1) & 3, h = p & 1;
  const unsigned char* blk = row + b * 144;
  return Piece{__ldcs(reinterpret_cast<const uint4*>(blk + 16 + 32 * j + 16 * h)), __ldg(reinterpret_cast<const uint4*>(blk))};
}

// dot16q: 16 int8 weights against x quantised (piece p: half of group p / 2).
__device__ __forceinline__ float dot16q(uint4 w, const signed char* xq, const float4* xs, int p) {
  const int4 xv = *reinterpret_cast<const int4*>(xq + 16 * p);
  int s = __dp4a((int)w.x, xv.x, 0);
  s = __dp4a((int)w.y, xv.y, s);
  s = __dp4a((int)w.z, xv.z, s);
  s = __dp4a((int)w.w, xv.w, s);
  return (float)s * xs[p >> 1].x;
}

// int8_dot: piece p of an int8 row against x, f32 or (DP4A) quantised.
__device__ __forceinline__ float int8_dot(uint4 w, const float* xf, const signed char* xq, const float4* xs, int p) {
  if (DP4A) return dot16q(w, xq, xs, p);
  return dot16(make_int4((int)w.x, (int)w.y, (int)w.z, (int)w.w), xf + 16 * p);
}

template <int T>
__device__ __forceinline__ float piece_dot(const Piece& w, const float* xf, const signed char* xq, const float4* xs, int p) {
  if (T == 0) return int8_dot(w.q, xf, xq, xs, p);
  return q4k_unit(w.hdr, w.q, xq, xs, p);
}

template <int PDL, int PRE, int T>
__global__ void __launch_bounds__(256) gemv_launch(Gemv g) {
  constexpr int U = 4;
  extern __shared__ __align__(16) float xsh[];
  signed char* xq = reinterpret_cast<signed char*>(xsh + g.K);  // T 1: x quantised
  float4* xqs = reinterpret_cast<float4*>(xq + g.K);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = (blockIdx.x * 8 + warp) * 2;
  const int ppr = T ? g.K / 32 : g.K / 16;  // pieces a row
  const int rb = row_bytes(g);
  __shared__ int ids[ROUTE_MAX];
  const bool pre = PRE && g.erows == 0;  // a routed GEMV's rows wait for the router
  const unsigned char* w0 = g.w + (long long)min(r0, g.N - 1) * rb;
  const unsigned char* w1 = g.w + (long long)min(r0 + 1, g.N - 1) * rb;
  const Piece zero{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  Piece a[U], b[U];
  if (pre) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int q = lane + 32 * u;
      a[u] = q < ppr ? load_piece<T>(w0, q) : zero;
      b[u] = q < ppr ? load_piece<T>(w1, q) : zero;
    }
  }
  if (PRE) asm volatile("griddepcontrol.launch_dependents;");
  if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
  __shared__ float red[8];
  float ss = 0.f;
  for (int k = threadIdx.x; k < g.K / 4; k += 256) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(g.x) + k);
    reinterpret_cast<float4*>(xsh)[k] = v;
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = warp_sum(ss);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  const float inv = g.norm ? rms_inv(red, 8, g.K) : 1.f;
  if (x_quantised(T)) {
    quantise_x(xsh, xq, xqs, g.K, warp, 8);
    __syncthreads();
  }
  if (g.erows) {
    if (warp == 0) topk_warp([&](int e) { return __ldcg(g.route + e); }, g.N / g.erows, ids);
    __syncthreads();
    w0 = g.w + weight_row(g, ids, min(r0, g.N - 1)) * rb;
    w1 = g.w + weight_row(g, ids, min(r0 + 1, g.N - 1)) * rb;
  }
  float s0 = 0.f, s1 = 0.f;
  for (int p = lane; p < ppr; p += 32 * U) {
    if (!pre || p != lane) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int q = p + 32 * u;
        a[u] = q < ppr ? load_piece<T>(w0, q) : zero;
        b[u] = q < ppr ? load_piece<T>(w1, q) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int q = p + 32 * u;
      if (q < ppr) {
        s0 += piece_dot<T>(a[u], xsh, xq, xqs, q);
        s1 += piece_dot<T>(b[u], xsh, xq, xqs, q);
      }
    }
  }
  s0 = warp_sum(s0);
  s1 = warp_sum(s1);
  if (lane == 0) {
    if (r0 < g.N) g.y[r0] = s0 * g.scale * inv;
    if (r0 + 1 < g.N) g.y[r0 + 1] = s1 * g.scale * inv;
  }
}

// ---------------------------------------------------------------- the ring
#ifndef SLOT
#define SLOT 9216  // -DSLOT=18432 -DNSLOT=8: half the copies, twice the bytes each
#endif
#ifndef NSLOT
#define NSLOT 16
#endif
#ifndef RB
#define RB 1  // -DRB=4: a consumer warp sums 4 rows of a chunk at once (loads together, 4 sums in flight)
#endif
#ifndef CWARPS
#define CWARPS 8  // -DCWARPS=16: twice the consumers (NSLOT must stay a multiple)
#endif
#define CONS (32 * CWARPS)  // consumer threads; warp CWARPS produces

struct Chain {
  const Gemv* g;
  int n;
  unsigned* counters;  // one a GEMV: blocks done, epoch * gridDim.x after run `epoch`
  unsigned epoch;
  int dep;    // 0: no GEMV waits for the one before (timing only: the ring's streaming alone)
  int nslot;  // the ring's slots in use, a multiple of CWARPS (at most NSLOT): how much HBM time it buffers
  int xmax;   // the largest K: x's staging after the ring (f32; then, where a GEMV is q4_k, int8 and scales)
  int sum;    // 0 (nosum): consumers take and free each chunk unread, the ring's streaming alone (y is wrong)
};

// A wait that never ends is a bug of this probe: trap rather than hang the call.
#define SPIN_LIMIT (1ll << 24)

// mbar_wait: until the phase of parity par of the mbarrier at bar is complete.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned par) {
  unsigned done = 0;
  long long spins = 0;
  do {
    if (++spins > SPIN_LIMIT) __trap();
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(par)
                 : "memory");
  } while (!done);
}

// count_wait: until *counter reaches want (acquire).
__device__ __forceinline__ void count_wait(const unsigned* counter, unsigned want) {
  unsigned v;
  long long spins = 0;
  do {
    if (++spins > SPIN_LIMIT) __trap();
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  } while ((int)(v - want) < 0);
}

// The block's rows of GEMV i and its rows a chunk.
__device__ __forceinline__ void block_rows(const Gemv& g, int& rb, int& re, int& rpc) {
  rb = (int)((long long)g.N * blockIdx.x / gridDim.x);
  re = (int)((long long)g.N * (blockIdx.x + 1) / gridDim.x);
  rpc = max(1, min(32, SLOT / row_bytes(g)));  // a lane a row's sum
}

// Chunk j of the block's stream (every GEMV's chunks in order) belongs to
// consumer warp j % CWARPS, its k-th (k = j / CWARPS), and lands in that
// warp's slot w + CWARPS * (k % per), phase k / per: each warp waits only
// on its own slots, in order, so no wait can see an older phase's parity.
struct Slot {
  int s;
  unsigned par;
};
__device__ __forceinline__ Slot chunk_slot(int j, int nslot) {
  const int w = j % CWARPS, k = j / CWARPS, per = nslot / CWARPS;
  return Slot{w + CWARPS * (k % per), (unsigned)((k / per) & 1)};
}

__global__ void __launch_bounds__(CONS + 32, 1) gemv_ring(Chain c) {
  extern __shared__ __align__(128) unsigned char ring_smem[];
  __shared__ __align__(8) unsigned long long full[NSLOT], empty[NSLOT];
  __shared__ float red[CWARPS];
  __shared__ int pids[ROUTE_MAX];  // the producer's route ids
  float* xs = reinterpret_cast<float*>(ring_smem + c.nslot * SLOT);
  signed char* xq = reinterpret_cast<signed char*>(xs + c.xmax);  // q4_k GEMVs: x quantised
  float4* xqs = reinterpret_cast<float4*>(xq + c.xmax);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < NSLOT; s++) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(&full[s])), "r"(1));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(&empty[s])), "r"(1));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == CWARPS) {  // the producer warp: lane 0 streams every chunk in order
    int j = 0;
    for (int i = 0; i < c.n; i++) {
      const Gemv g = c.g[i];
      int rb, re, rpc;
      block_rows(g, rb, re, rpc);
      if (g.erows) {  // a routed GEMV: its rows are known once the GEMV before it is done
        if (lane == 0 && c.dep) count_wait(c.counters + i - 1, c.epoch * gridDim.x);
        __syncwarp();
        topk_warp([&](int e) { return __ldcg(g.route + e); }, g.N / g.erows, pids);
        __syncwarp();
      }
      if (lane != 0) continue;
      const int rbytes = row_bytes(g);
      for (int r = rb; r < re; r += rpc, j++) {
        const Slot sl = chunk_slot(j, c.nslot);
        const int rows = min(rpc, re - r);
        const unsigned bytes = (unsigned)(rows * rbytes);
        mbar_wait(su32(&empty[sl.s]), sl.par ^ 1);
        const unsigned fb = su32(&full[sl.s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb), "r"(bytes) : "memory");
        if (g.erows == 0 || r / g.erows == (r + rows - 1) / g.erows) {
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                           su32(ring_smem + sl.s * SLOT)),
                       "l"(g.w + weight_row(g, pids, r) * rbytes), "r"(bytes), "r"(fb)
                       : "memory");
        } else {  // the chunk's rows span two experts: a copy a row
          for (int q = 0; q < rows; q++)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             su32(ring_smem + sl.s * SLOT + q * rbytes)),
                         "l"(g.w + weight_row(g, pids, r + q) * rbytes), "r"((unsigned)rbytes), "r"(fb)
                         : "memory");
        }
      }
    }
    return;
  }
  int j = 0;  // the block's chunks so far (every warp counts all of them)
  for (int i = 0; i < c.n; i++) {
    const Gemv g = c.g[i];
    int rb, re, rpc;
    block_rows(g, rb, re, rpc);
    if (i > 0 && c.dep) {  // the previous GEMV done by every block
      if (tid == 0) count_wait(c.counters + i - 1, c.epoch * gridDim.x);
      asm volatile("bar.sync 1, %0;" ::"r"(CONS) : "memory");
    }
    float ss = 0.f;
    for (int k = tid; k < g.K / 4; k += CONS) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(g.x) + k);
      reinterpret_cast<float4*>(xs)[k] = v;
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    asm volatile("bar.sync 1, %0;" ::"r"(CONS) : "memory");
    const float inv = g.norm ? rms_inv(red, CWARPS, g.K) : 1.f;
    if (x_quantised(g.type)) {
      quantise_x(xs, xq, xqs, g.K, warp, CWARPS);
      asm volatile("bar.sync 1, %0;" ::"r"(CONS) : "memory");
    }
    const int ppr = g.type ? g.K / 32 : g.K / 16;  // pieces a row (q4_k units or 16 int8 bytes), at least 32
    const int rbytes = row_bytes(g);
    for (int r = rb; r < re; r += rpc, j++) {
      if (j % CWARPS != warp) continue;
      const Slot sl = chunk_slot(j, c.nslot);
      const int rows = min(rpc, re - r);
      mbar_wait(su32(&full[sl.s]), sl.par);
      const unsigned char* slot = ring_smem + sl.s * SLOT;
      float mine = 0.f;  // lane q: row q's sum (rows <= 32: block_rows)
      // RB rows at a time: their loads together and RB independent sums and
      // reductions (RB 1: a row at a time, the first form); each row's sum
      // in the same order either way. Rows past the chunk's last are not
      // summed: most chunks hold 1-5 rows (9 KB slots; K 5760 to 10240 give
      // one), and 097669b's form, which summed the last row again in their
      // place, did RB times the work on those (H100, 2026-12-05: slower)
      for (int q0 = 0; q0 < (c.sum ? rows : 0); q0 += RB) {
        float v[RB];
#pragma unroll
        for (int b = 0; b < RB; b++) v[b] = 0.f;
        if (g.type) {
          for (int p = lane; p < ppr; p += 32) {
            const int off = (p >> 3) * 144, qo = off + 16 + 32 * ((p >> 1) & 3) + 16 * (p & 1);
#pragma unroll
            for (int b = 0; b < RB; b++) {
              const unsigned char* row = slot + (q0 + b) * rbytes;
              if (q0 + b < rows)  // warp-uniform
                v[b] += q4k_unit(*reinterpret_cast<const uint4*>(row + off), *reinterpret_cast<const uint4*>(row + qo), xq, xqs, p);
            }
          }
        } else {
          for (int p = lane; p < ppr; p += 32) {
#pragma unroll
            for (int b = 0; b < RB; b++)
              if (q0 + b < rows)  // warp-uniform
                v[b] += int8_dot(reinterpret_cast<const uint4*>(slot + (q0 + b) * rbytes)[p], xs, xq, xqs, p);
          }
        }
#pragma unroll
        for (int b = 0; b < RB; b++) {
          if (q0 + b >= rows) break;  // warp-uniform
          const float t = warp_sum(v[b]);
          if (lane == q0 + b) mine = t;
        }
      }
      __syncwarp();  // every lane's reads of the slot are done
      if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(su32(&empty[sl.s])) : "memory");
      if (lane < rows) g.y[r + lane] = mine * g.scale * inv;
    }
    // every consumer's stores of this GEMV, then the count
    asm volatile("bar.sync 1, %0;" ::"r"(CONS) : "memory");
    if (tid == 0) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c.counters + i) : "memory");
    }
  }
}

// The read ceiling: every weight byte once, as the launches read them.
__global__ void __launch_bounds__(256) read_all(const int4* w, long long n, int* sink) {
  int acc = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int4 v = __ldcs(w + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678) sink[0] = acc;
}

// ---------------------------------------------------------------- host
#ifndef __CUDACC_RTC__
static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int layers = argc > 1 ? atoi(argv[1]) : 48;
  int norm = 0, route = 1, q4k = 0, sum = 1;
  for (int a = 2; a < argc; a++) {
    if (!strcmp(argv[a], "norm")) norm = 1;  // every GEMV divides by its x's rms (in every block)
    else if (!strcmp(argv[a], "noroute")) route = 0;  // the routed gate+up's rows fixed, as the others'
    else if (!strcmp(argv[a], "nosum")) sum = 0;  // the ring's consumers sum nothing: its streaming alone
    else if (!strcmp(argv[a], "q4k")) q4k = 1;  // the routed gate+up and down in q4_k, at S-2.1's shapes
    else {
      fprintf(stderr, "usage: %s [LAYERS] [norm] [noroute] [q4k] [nosum]\n", argv[0]);
      return 2;
    }
  }
  // A layer's GEMVs: N, K, type, x the y of the GEMV `back` before (the routed gate+up's
  // experts are picked from the one before), erows (the routed gate+up: 10 of 256 experts).
  struct Spec {
    int N, K, type, back, erows;
  };
  const Spec int8_layer[7] = {{11264, 3072, 0, 1, 0}, {9216, 512, 0, 1, 0},     {3072, 9216, 0, 1, 0},
                              {2304, 3072, 0, 1, 0},  {15360, 2304, 0, 1, 1536}, {3072, 5760, 0, 1, 0},
                              {3072, 1024, 0, 1, 0}};
  // q4k: the routed gate+up 10 x 2048 rows of 3072 from o_proj's y (the router's picks its
  // experts), the routed down as one GEMV over the ten experts' 1024 inputs each (K 10240)
  const Spec q4k_layer[7] = {{11264, 3072, 0, 1, 0}, {9216, 512, 0, 1, 0},     {3072, 9216, 0, 1, 0},
                             {2304, 3072, 0, 1, 0},  {20480, 3072, 1, 2, 2048}, {3072, 10240, 1, 1, 0},
                             {3072, 1024, 0, 1, 0}};
  const Spec* layer = q4k ? q4k_layer : int8_layer;
  const int experts = 256, topk = 10;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = 7 * layers;
  auto routed = [&](int i) { return route && layer[i % 7].erows > 0; };
  auto rowb = [&](const Spec& sp) { return sp.type ? sp.K / 256 * 144 : sp.K; };
  long long wbytes = 0, alloc = 0;  // bytes the chain reads; bytes of weights held
  int xmax = 0;
  for (int i = 0; i < 7; i++) {
    const Spec& sp = layer[i];
    const int rb = rowb(sp);
    if (rb > SLOT || rb % 16 || (sp.type ? sp.K % 256 || sp.K < 1024 : sp.K % 16 || sp.K < 512)) {
      fprintf(stderr, "gemv-chain: GEMV %d's rows (%d bytes, K %d) do not fit the probe's pieces and slots\n", i, rb, sp.K);
      return 1;
    }
    xmax = std::max(xmax, sp.K);
  }
  for (int i = 0; i < n; i++) {
    const long long b = (long long)layer[i % 7].N * rowb(layer[i % 7]);
    wbytes += b;
    alloc += routed(i) ? 0 : b;
  }
  const Spec& rs = layer[4];
  const long long stack = route ? (long long)experts * rs.erows * rowb(rs) : 0;
  unsigned char* W;
  CK(cudaMalloc(&W, alloc + stack));
  fill<<<4 * sms, 256>>>(reinterpret_cast<signed char*>(W), alloc + stack, 12345u);
  // y buffers: one a GEMV (the forms overwrite them), the input x0
  float *Y, *x0;
  std::vector<long long> yoff(n);
  long long ytotal = 0;
  for (int i = 0; i < n; i++) {
    yoff[i] = ytotal;
    ytotal += layer[i % 7].N;
  }
  CK(cudaMalloc(&Y, ytotal * sizeof(float)));
  CK(cudaMalloc(&x0, xmax * sizeof(float)));
  std::vector<float> hx(xmax);
  for (int i = 0; i < xmax; i++) hx[i] = sinf(0.37f * i) * 1.3f;
  CK(cudaMemcpy(x0, hx.data(), xmax * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<Gemv> hg(n);
  long long wo = 0;
  for (int i = 0; i < n; i++) {
    const Spec& sp = layer[i % 7];
    if (i >= sp.back && layer[(i - sp.back) % 7].N < sp.K) {
      fprintf(stderr, "gemv-chain: GEMV %d's x (%d values) is shorter than its K %d\n", i, layer[(i - sp.back) % 7].N, sp.K);
      return 1;
    }
    // int8 weights (uniform in [-127, 127], rms 73.3) keep x's scale; q4_k's (d*sc*q - dmin*m,
    // mean about 38, rms about 60) do not have a zero mean, so the routed down, whose x then
    // has one, divides by its x's rms always (else the chain would grow about 40x a layer)
    const float scale = sp.type ? (sp.back == 1 ? 1.f / (60.f * sp.K) : 1.f / (60.f * sqrtf((float)sp.K)))
                                : 1.f / (73.3f * sqrtf((float)sp.K));
    const float* x = i >= sp.back ? Y + yoff[i - sp.back] : x0;
    hg[i] = Gemv{routed(i) ? W + alloc : W + wo, sp.N, sp.K, sp.type, scale, norm || (sp.type && sp.back == 1), x,
                 i >= 1 ? Y + yoff[i - 1] : x0, Y + yoff[i], routed(i) ? sp.erows : 0};
    if (routed(i) && sp.N != topk * sp.erows) {
      fprintf(stderr, "gemv-chain: the routed GEMV has %d rows, not %d x %d\n", sp.N, topk, sp.erows);
      return 1;
    }
    wo += routed(i) ? 0 : (long long)sp.N * rowb(sp);
  }
  Gemv* dg;
  CK(cudaMalloc(&dg, n * sizeof(Gemv)));
  CK(cudaMemcpy(dg, hg.data(), n * sizeof(Gemv), cudaMemcpyHostToDevice));
  unsigned* counters;
  CK(cudaMalloc(&counters, n * sizeof(unsigned)));
  CK(cudaMemset(counters, 0, n * sizeof(unsigned)));
  const int lastN = hg[n - 1].N;
  float* lastY = hg[n - 1].y;
  // x staged (f32) and, for q4_k, quantised (int8 a value, 16 bytes a group of 32)
  const int xsmem = xmax * 4 + (x_quantised(q4k) ? xq_bytes(xmax) : 0);
  CK(cudaFuncSetAttribute(gemv_launch<0, 0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, xsmem));
  CK(cudaFuncSetAttribute(gemv_launch<1, 0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, xsmem));
  CK(cudaFuncSetAttribute(gemv_launch<1, 1, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, xsmem));
  CK(cudaFuncSetAttribute(gemv_launch<0, 0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, xsmem));
  CK(cudaFuncSetAttribute(gemv_launch<1, 0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, xsmem));
  CK(cudaFuncSetAttribute(gemv_launch<1, 1, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, xsmem));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaDeviceSynchronize());
  printf("gemv-chain: %d layers, %d GEMVs, %.2f GB of weights read (%.1f MB a layer), %d SMs%s%s%s%s\n", layers, n,
         wbytes / 1e9, wbytes / 1e6 / layers, sms, q4k ? ", the routed experts q4_k (the rest int8)" : ", int8",
         DP4A ? " (x quantised, dp4a)" : " (x f32)",
         norm ? ", each x normalised in every block" : "",
         route ? ", the gate+up routed (top-10 of 256 experts, one stack)" : "");

  std::vector<float> ref(lastN), got(lastN);
  float ms_pdl = 0, ms_ring = 0;  // launch pdl's and ring 16's times
  auto report = [&](const char* name, float ms, bool isref) {
    CK(cudaMemcpy(got.data(), lastY, lastN * sizeof(float), cudaMemcpyDeviceToHost));
    if (isref) {
      ref = got;
      double sum = 0;  // to compare builds: the same x's quantisation gives the same y
      for (int i = 0; i < lastN; i++) sum += fabs((double)got[i]);
      printf("  launch plain's last y: sum of |y| %.9e\n", sum);
    }
    double md = 0, mx = 0;
    for (int i = 0; i < lastN; i++) {
      md = std::max(md, (double)fabsf(got[i] - ref[i]));
      mx = std::max(mx, (double)fabsf(ref[i]));
    }
    printf("  %-12s %8.2f us a layer  %5.2f TB/s  max |y - plain| / max |plain| = %.2e\n", name, 1e3 * ms / layers,
           wbytes / (ms * 1e-3) / 1e12, md / mx);
  };
  const int reps = 7;
  // launches, in a graph
  for (int form = 0; form < 3; form++) {
    cudaGraph_t graph;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; i++) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3((hg[i].N + 15) / 16);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = hg[i].K * sizeof(float) + (x_quantised(hg[i].type) ? xq_bytes(hg[i].K) : 0);
      cfg.stream = st;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at;
      cfg.numAttrs = form > 0 ? 1 : 0;
      const int t = hg[i].type;
      if (form == 0) CK(cudaLaunchKernelEx(&cfg, t ? gemv_launch<0, 0, 1> : gemv_launch<0, 0, 0>, hg[i]));
      if (form == 1) CK(cudaLaunchKernelEx(&cfg, t ? gemv_launch<1, 0, 1> : gemv_launch<1, 0, 0>, hg[i]));
      if (form == 2) CK(cudaLaunchKernelEx(&cfg, t ? gemv_launch<1, 1, 1> : gemv_launch<1, 1, 0>, hg[i]));
    }
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&ge, graph, 0));
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
      CK(cudaEventRecord(e0, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    report(form == 0 ? "launch plain" : form == 1 ? "launch pdl" : "pre", median(t), form == 0);
    if (form == 1) ms_pdl = median(t);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(graph));
  }
  // the ring
  const int smem = NSLOT * SLOT + xsmem;
  CK(cudaFuncSetAttribute(gemv_ring, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // (dep, slots, blocks an SM): the last, two blocks of 8 slots an SM, runs only where the
  // occupancy calculator says two fit (the counters need every block resident)
  int two = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&two, gemv_ring, CONS + 32, 8 * SLOT + xsmem));
  const int forms[4][3] = {{1, NSLOT, 1}, {1, NSLOT / 2, 1}, {0, NSLOT, 1}, {1, NSLOT / 2, 2}};
  for (const auto& f : forms) {
    const int dep = f[0], nslot = f[1], per = f[2], grid = per * sms, fsmem = nslot * SLOT + xsmem;
    if (nslot % CWARPS) {
      printf("  ring %d x%d: skipped, not a multiple of the %d consumer warps\n", nslot, per, CWARPS);
      continue;
    }
    if (per > two) {
      printf("  ring %d x%d: skipped, %d block(s) of %d B an SM fit\n", nslot, per, two, fsmem);
      continue;
    }
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
      static unsigned epoch = 0;
      epoch++;
      Chain c{dg, n, counters, epoch, dep, nslot, xmax, sum};
      CK(cudaEventRecord(e0, st));
      gemv_ring<<<grid, CONS + 32, fsmem, st>>>(c);
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    char name[32];
    snprintf(name, sizeof name, "ring %d%s%s", nslot, per > 1 ? " x2" : "", dep ? "" : " nodep");
    report(name, median(t), false);
    if (dep && nslot == NSLOT && per == 1) ms_ring = median(t);
  }
  // the bytes alone: a plain read of all weights
  {
    int* sink;
    CK(cudaMalloc(&sink, 4));
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
      CK(cudaEventRecord(e0, st));
      read_all<<<8 * sms, 256, 0, st>>>(reinterpret_cast<const int4*>(W), alloc / 16, sink);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    const float ms = median(t);
    printf("  %-12s %8.2f us a layer  %5.2f TB/s  (the unrouted weights read once, no chain; us scaled to a layer's bytes)\n",
           "read", 1e3 * ms / layers * (double)wbytes / alloc, alloc / (ms * 1e-3) / 1e12);
    const double read_ms = ms * (double)wbytes / alloc;
    printf("gemv-chain: ring %d %.2fx launch pdl's time, at %.0f%% of the read rate; scaled to a 134 MB layer: %.1f us "
           "(issue 12's 450 tok/s: about 46)\n",
           NSLOT, ms_ring / ms_pdl, 100 * read_ms / ms_ring, 1e3 * ms_ring / layers * 134e6 / (wbytes / (double)layers));
  }
  return 0;
}
#endif
