// Block-quantised weights (ggml's types) on the GPU: decode GEMVs that read
// the quantised blocks directly, the routed-expert MoE GEMVs, and a
// dequantiser (prefill fallback and tests).
//
// Activations are quantised once per GEMV input to int8 in groups of 32
// (q8x_quantize: scale d = max|x|/127 and the sums d*sum(q) of each half,
// as ggml's q8_1 with one more sum), so the inner products run on dp4a: reading x as f32 or bf16
// would move 4-8 bytes through L1 for every 0.56-byte 4-bit weight. Every
// product is accumulated in f32 per group of 32 (or 16) and scaled there.
//
// Weight layouts on the device (lagc's; lower's weight transforms repack
// ggml's blocks where the block size is not a multiple of 16 bytes, so
// every load is a 16-byte vector). A matrix has `rows` rows of K elements
// (an expert stack [E,N,K] has E*N rows); nb = K / block elements.
//   q8_0    int8 qs [rows][K], then f16 d [rows][K/32] at align256(rows*K)
//   q4_k    144-byte bodies (scales[8], mins[8] as bytes, unpacked from
//           ggml's 6-bit packing; qs[128]) [rows][nb], then (f16 d, f16
//           dmin) [rows][nb] at align256(rows*nb*144)
//   q5_k    176-byte bodies (scales[8], mins[8], qh[32], qs[128]), then
//           (d, dmin) as q4_k
//   q6_k    208-byte bodies (ql[128], qh[64], int8 scales[16]) [rows][nb],
//           then f16 d [rows][nb] at align256(rows*nb*208)
//   iq4_xs  qs[128] [rows][nb], then 8-byte heads (f16 d, u16 scales_h,
//           scales_l[4]) [rows][nb] at align256(rows*nb*128)
// Template type ids are ggml's type numbers.

#define QT_Q8_0 8
#define QT_Q4_K 12
#define QT_Q5_K 13
#define QT_Q6_K 14
#define QT_IQ4_XS 23

__device__ __forceinline__ float silu_q(float v) { return v / (1.f + expf(-v)); }

__device__ __forceinline__ float warp_sum_q(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float f16_bits(unsigned short b) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
  return f;
}

// Weights are read once: 16-byte loads that do not allocate in L1.
__device__ __forceinline__ uint4 ldq(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ int dp4a(int a, int b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ long long align256(long long n) { return (n + 255) & ~255LL; }

// Quantised activations of R rows: xq int8 [R][K], xs [R][K/32] of
// (d, d*sum(q[0..16)), d*sum(q[16..32)), 0) per group of 32.
struct QX {
  const signed char* q;
  const float4* s;
  int K;
};

__device__ __forceinline__ uint2 ldq2(const void* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait<0>();
}

__device__ __forceinline__ int dot16(const int (&wq)[4], int4 xv) {
  int s = dp4a(wq[0], xv.x, 0);
  s = dp4a(wq[1], xv.y, s);
  s = dp4a(wq[2], xv.z, s);
  return dp4a(wq[3], xv.w, s);
}

__device__ __forceinline__ int4 ldx16(const QX& x, int r, int e) {
  return *reinterpret_cast<const int4*>(x.q + (long long)r * x.K + e);
}
__device__ __forceinline__ float4 xsc(const QX& x, int r, int e) { return x.s[(long long)r * (x.K / 32) + e / 32]; }

// Byte i of 16 bytes held in registers (a runtime index must not take the
// registers' address: that would put them in local memory).
__device__ __forceinline__ int reg_byte(const uint4& v, int i) {
  const unsigned w = i < 8 ? (i < 4 ? v.x : v.y) : (i < 12 ? v.z : v.w);
  return (int)((w >> (8 * (i & 3))) & 0xFF);
}

// ------------------------------------------------------------ per type
//
// Every type is read in units of 32 weights of a row, so a row of K = 1024,
// 3072 or 9216 gives each lane of a warp the same number of units. QW<QT>
// has W (a unit's weight bytes in registers) with load(), X (the matching
// activations of one row) with xload(), and dot(), the unit's product. A
// lane's units are 32 apart, a multiple of every type's units per block, so
// a unit's place in its block is the same for all of a lane's units.
//
// The routed-expert kernels fill W in two parts instead: loadq() loads a
// unit's own quant bytes from global memory, loads() the bytes a block's
// units share from copies staged in shared memory (stage_rows: per row and
// block of BE elements, the SA bytes at offset SAOFF of its body in one
// array, its HEAD bytes in another), so that registers in flight hold
// quants only.

template <int QT> struct QW;

// x16: 16 activations as int8 words with their group's scale.
struct X32 {
  int4 a, b;
  float d;
};

template <> struct QW<QT_Q8_0> {
  static constexpr int BE = 32, BODY = 32, SA = 0, SAOFF = 0, HEAD = 2;
  struct W {
    uint4 a, b;
    float d;
  };
  using X = X32;
  static __device__ __forceinline__ W load(const unsigned char* w, long long rows, long long row, int K, int u) {
    const unsigned char* qs = w + row * K + (long long)u * 32;
    const unsigned short* dp = reinterpret_cast<const unsigned short*>(w + align256(rows * K));
    return W{ldq(qs), ldq(qs + 16), f16_bits(__ldg(dp + row * (K / 32) + u))};
  }
  static __device__ __forceinline__ void loadq(W& v, const unsigned char* w, long long row, int K, int u) {
    const unsigned char* qs = w + row * K + (long long)u * 32;
    v.a = ldq(qs);
    v.b = ldq(qs + 16);
  }
  static constexpr int QB = 32;
  static __device__ __forceinline__ void copyq(unsigned char* dst, const unsigned char* w, long long row, int K, int u) {
    const unsigned char* qs = w + row * K + (long long)u * 32;
    cp_async16(dst, qs);
    cp_async16(dst + 16, qs + 16);
  }
  static __device__ __forceinline__ void fromq(W& v, const unsigned char* src) {
    v.a = reinterpret_cast<const uint4*>(src)[0];
    v.b = reinterpret_cast<const uint4*>(src)[1];
  }
  static __device__ __forceinline__ void loads(W& v, const unsigned char* sa, const unsigned char* sh, int u) {
    v.d = f16_bits(reinterpret_cast<const unsigned short*>(sh)[u]);
  }
  static __device__ __forceinline__ X xload(const QX& x, int r, int u) {
    return X{ldx16(x, r, u * 32), ldx16(x, r, u * 32 + 16), xsc(x, r, u * 32).x};
  }
  static __device__ __forceinline__ float dot(const W& w, const X& x, int u) {
    const int wa[4] = {(int)w.a.x, (int)w.a.y, (int)w.a.z, (int)w.a.w};
    const int wb[4] = {(int)w.b.x, (int)w.b.y, (int)w.b.z, (int)w.b.w};
    return w.d * x.d * (float)(dot16(wa, x.a) + dot16(wb, x.b));
  }
};

// Q4_K and Q5_K: unit u is half h of 64-element chunk j of block b: its 16
// bytes of qs hold elements 64j+16h+[0,16) in the low nibbles (sub-block
// 2j) and 64j+32+16h+[0,16) in the high ones (sub-block 2j+1).
template <int QT> struct QWK45 {
  static constexpr int BYTES = QT == QT_Q4_K ? 144 : 176;
  // staged: (scales, mins) and, for q5_k, qh (four units share each half)
  static constexpr int BE = 256, BODY = BYTES, SA = QT == QT_Q4_K ? 16 : 48, SAOFF = 0, HEAD = 4;
  struct W {
    uint4 q, sm, qh;  // quants, (scales[8], mins[8]), high bits (q5_k)
    unsigned dd;      // f16 d, f16 dmin
  };
  struct X {
    int4 lo, hi;
    float da, db, suma, sumb;
  };
  static __device__ __forceinline__ W load(const unsigned char* w, long long rows, long long row, int K, int u) {
    const int nb = K / 256;
    const int b = u >> 3, j = (u >> 1) & 3, h = u & 1;
    const long long bi = row * nb + b;
    const unsigned char* blk = w + bi * BYTES;
    W v;
    v.sm = __ldg(reinterpret_cast<const uint4*>(blk));  // shared by the block's 8 units
    v.q = ldq(blk + (QT == QT_Q4_K ? 16 : 48) + 32 * j + 16 * h);
    if constexpr (QT == QT_Q5_K) v.qh = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 16 * h));
    v.dd = __ldg(reinterpret_cast<const unsigned*>(w + align256(rows * nb * BYTES)) + bi);
    return v;
  }
  static __device__ __forceinline__ void loadq(W& v, const unsigned char* w, long long row, int K, int u) {
    const int b = u >> 3, j = (u >> 1) & 3, h = u & 1;
    v.q = ldq(w + (row * (K / 256) + b) * BYTES + (QT == QT_Q4_K ? 16 : 48) + 32 * j + 16 * h);
  }
  static constexpr int QB = 16;
  static __device__ __forceinline__ void copyq(unsigned char* dst, const unsigned char* w, long long row, int K, int u) {
    const int b = u >> 3, j = (u >> 1) & 3, h = u & 1;
    cp_async16(dst, w + (row * (K / 256) + b) * BYTES + (QT == QT_Q4_K ? 16 : 48) + 32 * j + 16 * h);
  }
  static __device__ __forceinline__ void fromq(W& v, const unsigned char* src) { v.q = *reinterpret_cast<const uint4*>(src); }
  static __device__ __forceinline__ void loads(W& v, const unsigned char* sa, const unsigned char* sh, int u) {
    const int b = u >> 3, h = u & 1;
    const uint4* st = reinterpret_cast<const uint4*>(sa) + b * (SA / 16);
    v.sm = st[0];
    if constexpr (QT == QT_Q5_K) v.qh = st[1 + h];
    v.dd = reinterpret_cast<const unsigned*>(sh)[b];
  }
  static __device__ __forceinline__ X xload(const QX& x, int r, int u) {
    const int b = u >> 3, j = (u >> 1) & 3, h = u & 1;
    const int e = b * 256 + 64 * j + 16 * h;
    const float4 sa = xsc(x, r, e), sb = xsc(x, r, e + 32);
    return X{ldx16(x, r, e), ldx16(x, r, e + 32), sa.x, sb.x, h ? sa.z : sa.y, h ? sb.z : sb.y};
  }
  static __device__ __forceinline__ float dot(const W& w, const X& x, int u) {
    const int j = (u >> 1) & 3;
    const int raw[4] = {(int)w.q.x, (int)w.q.y, (int)w.q.z, (int)w.q.w};
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      lo[i] = raw[i] & 0x0F0F0F0F;
      hi[i] = (raw[i] >> 4) & 0x0F0F0F0F;
    }
    if constexpr (QT == QT_Q5_K) {
      const int qh[4] = {(int)w.qh.x, (int)w.qh.y, (int)w.qh.z, (int)w.qh.w};
#pragma unroll
      for (int i = 0; i < 4; i++) {
        lo[i] |= ((qh[i] >> (2 * j)) & 0x01010101) << 4;
        hi[i] |= ((qh[i] >> (2 * j + 1)) & 0x01010101) << 4;
      }
    }
    // scales 2j, 2j+1 are bytes 2j, 2j+1 of sm; mins bytes 8+2j, 9+2j
    const unsigned sw = (j < 2 ? w.sm.x : w.sm.y) >> (16 * (j & 1)), mw = (j < 2 ? w.sm.z : w.sm.w) >> (16 * (j & 1));
    const float d = f16_bits((unsigned short)(w.dd & 0xFFFF)), dmin = f16_bits((unsigned short)(w.dd >> 16));
    const float s0 = (float)(sw & 0xFF), s1 = (float)((sw >> 8) & 0xFF), m0 = (float)(mw & 0xFF), m1 = (float)((mw >> 8) & 0xFF);
    return d * (s0 * x.da * (float)dot16(lo, x.lo) + s1 * x.db * (float)dot16(hi, x.hi)) - dmin * (m0 * x.suma + m1 * x.sumb);
  }
};
template <> struct QW<QT_Q4_K> : QWK45<QT_Q4_K> {};
template <> struct QW<QT_Q5_K> : QWK45<QT_Q5_K> {};

// Q6_K: unit u is l in [8v, 8v+8) of 128-element half `half` of block b:
// elements n+l, n+32+l, n+64+l and n+96+l (n = 128 half), four groups of 8.
template <> struct QW<QT_Q6_K> {
  static constexpr int BE = 256, BODY = 208, SA = 16, SAOFF = 192, HEAD = 2;  // staged: int8 scales[16]
  struct W {
    uint2 la, lb, hh;
    uint4 sc;
    float d;
  };
  struct X {
    int2 v[4];
    float d[4];
  };
  static __device__ __forceinline__ W load(const unsigned char* w, long long rows, long long row, int K, int u) {
    const int nb = K / 256;
    const int b = u >> 3, half = (u >> 2) & 1, v = u & 3;
    const long long bi = row * nb + b;
    const unsigned char* body = w + bi * 208;
    const unsigned short* dp = reinterpret_cast<const unsigned short*>(w + align256(rows * nb * 208));
    W x;
    x.la = ldq2(body + 64 * half + 8 * v);        // ql[n/2 + l]
    x.lb = ldq2(body + 64 * half + 32 + 8 * v);   // ql[n/2 + 32 + l]
    x.hh = ldq2(body + 128 + 32 * half + 8 * v);  // qh[n/4 + l]
    x.sc = __ldg(reinterpret_cast<const uint4*>(body + 192));  // int8 scales[16]
    x.d = f16_bits(__ldg(dp + bi));
    return x;
  }
  static __device__ __forceinline__ void loadq(W& x, const unsigned char* w, long long row, int K, int u) {
    const int b = u >> 3, half = (u >> 2) & 1, v = u & 3;
    const unsigned char* body = w + (row * (K / 256) + b) * 208;
    x.la = ldq2(body + 64 * half + 8 * v);
    x.lb = ldq2(body + 64 * half + 32 + 8 * v);
    x.hh = ldq2(body + 128 + 32 * half + 8 * v);
  }
  static constexpr int QB = 24;
  static __device__ __forceinline__ void copyq(unsigned char* dst, const unsigned char* w, long long row, int K, int u) {
    const int b = u >> 3, half = (u >> 2) & 1, v = u & 3;
    const unsigned char* body = w + (row * (K / 256) + b) * 208;
    cp_async8(dst, body + 64 * half + 8 * v);
    cp_async8(dst + 8, body + 64 * half + 32 + 8 * v);
    cp_async8(dst + 16, body + 128 + 32 * half + 8 * v);
  }
  static __device__ __forceinline__ void fromq(W& x, const unsigned char* src) {
    const uint2* p = reinterpret_cast<const uint2*>(src);
    x.la = p[0];
    x.lb = p[1];
    x.hh = p[2];
  }
  static __device__ __forceinline__ void loads(W& x, const unsigned char* sa, const unsigned char* sh, int u) {
    const int b = u >> 3;
    x.sc = reinterpret_cast<const uint4*>(sa)[b];
    x.d = f16_bits(reinterpret_cast<const unsigned short*>(sh)[b]);
  }
  static __device__ __forceinline__ X xload(const QX& x, int r, int u) {
    const int e0 = (u >> 3) * 256 + 128 * ((u >> 2) & 1) + 8 * (u & 3);
    X o;
#pragma unroll
    for (int g = 0; g < 4; g++) {
      o.v[g] = *reinterpret_cast<const int2*>(x.q + (long long)r * x.K + e0 + 32 * g);
      o.d[g] = xsc(x, r, e0 + 32 * g).x;
    }
    return o;
  }
  static __device__ __forceinline__ float dot(const W& w, const X& x, int u) {
    const int half = (u >> 2) & 1, v = u & 3;
    const int a[2] = {(int)w.la.x, (int)w.la.y}, c[2] = {(int)w.lb.x, (int)w.lb.y}, h[2] = {(int)w.hh.x, (int)w.hh.y};
    int q[4][2];  // [group][word]: signed bytes q - 32
#pragma unroll
    for (int i = 0; i < 2; i++) {
      q[0][i] = (a[i] & 0x0F0F0F0F) | ((h[i] << 4) & 0x30303030);
      q[1][i] = (c[i] & 0x0F0F0F0F) | ((h[i] << 2) & 0x30303030);
      q[2][i] = ((a[i] >> 4) & 0x0F0F0F0F) | (h[i] & 0x30303030);
      q[3][i] = ((c[i] >> 4) & 0x0F0F0F0F) | ((h[i] >> 2) & 0x30303030);
#pragma unroll
      for (int g = 0; g < 4; g++) q[g][i] = (q[g][i] + 0x60606060) ^ (int)0x80808080;  // bytes q - 32, no carries
    }
    const int sc0 = 8 * half + v / 2;
    float sum = 0.f;
#pragma unroll
    for (int g = 0; g < 4; g++) {
      const float scf = (float)(signed char)reg_byte(w.sc, sc0 + 2 * g);
      const int s = dp4a(q[g][1], x.v[g].y, dp4a(q[g][0], x.v[g].x, 0));
      sum = fmaf(scf * x.d[g], (float)s, sum);
    }
    return w.d * sum;
  }
};

// IQ4_XS: unit u is sub-block ib of block b (16 bytes of qs: element i in
// the low nibble of byte i, element 16+i in the high one), mapped through
// the non-linear table (iq4_lookup, prelude.cuh).
template <> struct QW<QT_IQ4_XS> {
  static constexpr int BE = 256, BODY = 128, SA = 0, SAOFF = 0, HEAD = 8;
  struct W {
    uint4 q;
    uint2 hd;
  };
  using X = X32;
  static __device__ __forceinline__ W load(const unsigned char* w, long long rows, long long row, int K, int u) {
    const int nb = K / 256;
    const long long bi = row * nb + (u >> 3);
    return W{ldq(w + bi * 128 + 16 * (u & 7)), __ldg(reinterpret_cast<const uint2*>(w + align256(rows * nb * 128)) + bi)};
  }
  static __device__ __forceinline__ void loadq(W& v, const unsigned char* w, long long row, int K, int u) {
    v.q = ldq(w + (row * (K / 256) + (u >> 3)) * 128 + 16 * (u & 7));
  }
  static constexpr int QB = 16;
  static __device__ __forceinline__ void copyq(unsigned char* dst, const unsigned char* w, long long row, int K, int u) {
    cp_async16(dst, w + (row * (K / 256) + (u >> 3)) * 128 + 16 * (u & 7));
  }
  static __device__ __forceinline__ void fromq(W& v, const unsigned char* src) { v.q = *reinterpret_cast<const uint4*>(src); }
  static __device__ __forceinline__ void loads(W& v, const unsigned char* sa, const unsigned char* sh, int u) {
    v.hd = reinterpret_cast<const uint2*>(sh)[u >> 3];
  }
  static __device__ __forceinline__ X xload(const QX& x, int r, int u) {
    return X{ldx16(x, r, u * 32), ldx16(x, r, u * 32 + 16), xsc(x, r, u * 32).x};
  }
  static __device__ __forceinline__ float dot(const W& w, const X& x, int u) {
    const int ib = u & 7;
    const float d = f16_bits((unsigned short)(w.hd.x & 0xFFFF));
    const int sh = (int)(w.hd.x >> 16);
    const int sl = (int)((w.hd.y >> (8 * (ib / 2))) & 0xFF);
    const int ls = ((sl >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
    const int words[4] = {(int)w.q.x, (int)w.q.y, (int)w.q.z, (int)w.q.w};
    int lo[4], hi[4];  // elements 0..15, 16..31
#pragma unroll
    for (int i = 0; i < 4; i++) iq4_lookup(words[i], lo[i], hi[i]);
    return d * (float)(ls - 32) * x.d * (float)(dot16(lo, x.a) + dot16(hi, x.b));
  }
};

// wdots: NR weight rows (rowv) dotted with R activation rows over K; this
// lane's share is units first, first+step, ..., two at a time so that the
// loads of 2*NR units are in flight before any is used; each activation
// unit is loaded once for all NR rows. WPRE: the first two units' weights
// are asked for before griddepcontrol.wait (weights are never written), the
// wait follows, then the same sums in the same order; the loop's body is
// one (a peeled first round held more registers).
template <int QT, int NR, int R, bool WPRE = false>
__device__ __forceinline__ void wdots(const unsigned char* w, long long rows, const long long (&rowv)[NR], int K, const QX& x,
                                      int first, int step, float (&acc)[NR][R]) {
  using Q = QW<QT>;
  const int units = K / 32;
  int u = first;
  typename Q::W wv[2][NR];
  bool have = false;  // wv holds round u's weights already
  if constexpr (WPRE) {
    have = u + step < units;
    if (have)
#pragma unroll
      for (int q = 0; q < NR; q++) {
        wv[0][q] = Q::load(w, rows, rowv[q], K, u);
        wv[1][q] = Q::load(w, rows, rowv[q], K, u + step);
      }
    pdl_wait();
  }
  for (; u + step < units; u += 2 * step) {
    if (!have)
#pragma unroll
      for (int q = 0; q < NR; q++) {
        wv[0][q] = Q::load(w, rows, rowv[q], K, u);
        wv[1][q] = Q::load(w, rows, rowv[q], K, u + step);
      }
    have = false;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const typename Q::X xa = Q::xload(x, r, u), xb = Q::xload(x, r, u + step);
#pragma unroll
      for (int q = 0; q < NR; q++) acc[q][r] += Q::dot(wv[0][q], xa, u) + Q::dot(wv[1][q], xb, u + step);
    }
  }
  if (u < units) {
    typename Q::W wv[NR];
#pragma unroll
    for (int q = 0; q < NR; q++) wv[q] = Q::load(w, rows, rowv[q], K, u);
#pragma unroll
    for (int r = 0; r < R; r++) {
      const typename Q::X xa = Q::xload(x, r, u);
#pragma unroll
      for (int q = 0; q < NR; q++) acc[q][r] += Q::dot(wv[q], xa, u);
    }
  }
}

// ------------------------------------------------------------- kernels

// q8x_group quantises a group of 32 values, lane i holding element i's
// value v: it returns lane i's int8 value and sets s, in lane 0, to the
// group's (d, d*sum(q[0..16)), d*sum(q[16..32)), 0). Every quantised
// activation is made here, so a group's bytes do not depend on which
// kernel quantised it.
__device__ __forceinline__ int q8x_group(float v, float4& s) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.f;
  const int q = amax > 0.f ? __float2int_rn(v / d) : 0;
  int sum = q;  // sums over each half of the group
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const int s16 = __shfl_sync(0xffffffffu, sum, 16);
  s = make_float4(d, d * (float)sum, d * (float)s16, 0.f);
  return q;
}

// xq, xs = the int8 groups of x [R, K] (K a multiple of 32): one warp per
// group of 32, lane i element i.
template <typename TX>
__global__ void __launch_bounds__(256) q8x_quantize(long long groups, const TX* __restrict__ x, signed char* __restrict__ xq,
                                                    float4* __restrict__ xs) {
  pdl_wait();
  const int lane = threadIdx.x & 31;
  for (long long g = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < groups;
       g += ((long long)gridDim.x * blockDim.x) >> 5) {
    float4 sc;
    xq[g * 32 + lane] = (signed char)q8x_group(to_f32(x[g * 32 + lane]), sc);
    if (lane == 0) xs[g] = sc;
  }
}

// y[r, n] = w[row0 + n] . x[r] for R (<= 8) rows of quantised activations
// (w has `rows` rows; row0 picks a row block of it); a group of SPLIT
// warps of a block computes NW consecutive output rows,
// each warp every SPLIT-th run of 32 units of K, their sums added in warp
// order (with SWIGLU, w is [2N, K] and y = silu(gate) * up, gate row n and
// up row N+n). The body of qgemv and qgemv_xin, which differ only in where
// x's quantised copy lies. PRE: griddepcontrol.wait between the sums and
// the stores (qgemv_xin_norm_pre), by every thread. SPLITY: the values go
// to *sy's outputs instead of y (qgemv_split), the same sums. WPRE: the
// caller has not waited; wdots waits after asking for its first weights.
template <typename TY, int QT, int R, int SWIGLU, int NW, int SPLIT, bool PRE = false, bool SPLITY = false, bool WPRE = false>
__device__ __forceinline__ void qgemv_rows(int blk, int N, int K, long long rows, long long row0, const unsigned char* __restrict__ w,
                                           const QX& x, TY* __restrict__ y, int accumulate,
                                           const SplitY<TY>* sy = nullptr) {
  constexpr int NR = SWIGLU ? 2 * NW : NW;
  __shared__ float part[8][NR][R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slice = warp % SPLIT;
  const int n0 = (blk * (8 / SPLIT) + warp / SPLIT) * NW;
  long long rowv[NR];
#pragma unroll
  for (int q = 0; q < NW; q++) {
    rowv[q] = row0 + min(n0 + q, N - 1);  // past N: a valid row, result unused
    if constexpr (SWIGLU) rowv[NW + q] = (long long)N + rowv[q];
  }
  float acc[NR][R];
#pragma unroll
  for (int q = 0; q < NR; q++)
#pragma unroll
    for (int r = 0; r < R; r++) acc[q][r] = 0.f;
  if (n0 < N)
    wdots<QT, NR, R, WPRE>(w, rows, rowv, K, x, slice * 32 + lane, SPLIT * 32, acc);
  else if constexpr (WPRE)
    pdl_wait();
#pragma unroll
  for (int q = 0; q < NR; q++)
#pragma unroll
    for (int r = 0; r < R; r++) acc[q][r] = warp_sum_q(acc[q][r]);
  if constexpr (SPLIT > 1) {
    if (lane == 0)
#pragma unroll
      for (int q = 0; q < NR; q++)
#pragma unroll
        for (int r = 0; r < R; r++) part[warp][q][r] = acc[q][r];
    __syncthreads();
    if (lane == 0 && slice == 0)
#pragma unroll
      for (int q = 0; q < NR; q++)
#pragma unroll
        for (int r = 0; r < R; r++) {
          float v = 0.f;
          for (int i = 0; i < SPLIT; i++) v += part[warp + i][q][r];
          acc[q][r] = v;
        }
  }
  if constexpr (PRE) pdl_wait();
  if (lane != 0 || slice != 0) return;
#pragma unroll
  for (int q = 0; q < NW; q++)
#pragma unroll
    for (int r = 0; r < R; r++)
      if (n0 + q < N) {
        float v = SWIGLU ? silu_q(acc[q][r]) * acc[SWIGLU ? NW + q : q][r] : acc[q][r];
        if constexpr (SPLITY) {
          sy->store(N, r, n0 + q, v);
        } else {
          const long long o = (long long)r * N + n0 + q;
          if (accumulate) v += to_f32(y[o]);
          y[o] = from_f32<TY>(v);
        }
      }
}

template <typename TY, int QT, int R, int SWIGLU, int NW, int SPLIT>
__global__ void __launch_bounds__(256, LAGC_MINB(0)) qgemv(int N, int K, long long rows, long long row0, const unsigned char* __restrict__ w,
                                             const signed char* __restrict__ xq, const float4* __restrict__ xs,
                                             TY* __restrict__ y, int accumulate) {
#ifdef LAGC_QGEMV_WAIT_FIRST
  // The form before (for A/B runs, through LAGC_NVRTC_OPTIONS).
  pdl_wait();
  qgemv_rows<TY, QT, R, SWIGLU, NW, SPLIT>(blockIdx.x, N, K, rows, row0, w, QX{xq, xs, K}, y, accumulate);
#else
  // Each lane's first weights are asked for before the wait (weights are
  // never written), in flight while the launch before ends: after a
  // one-block join most of the blocks are resident beside it. The same
  // sums: the same bits (TestQGEMVWPreGPU).
  qgemv_rows<TY, QT, R, SWIGLU, NW, SPLIT, false, false, true>(blockIdx.x, N, K, rows, row0, w, QX{xq, xs, K}, y, accumulate);
#endif
}

// qgemv_pair is two qgemv launches of R rows that do not depend on each
// other (lower.QGEMVPair: llama.cpp's mixtures keep attn_v in another type
// than q, k and the gate, so v's GEMV stays apart) in one launch: blocks
// [0, nb1) run the first's body on their own index, the rest the second's
// on theirs less nb1, as the two launches would: the same bits, one link
// of a decode step's chain fewer.
template <typename TY1, typename TY2, int R, int QT1, int SW1, int NW1, int SPLIT1, int QT2, int SW2, int NW2, int SPLIT2>
__global__ void __launch_bounds__(256) qgemv_pair(int nb1, int N1, int K1, long long rows1, long long row01,
                                                  const unsigned char* __restrict__ w1, const signed char* __restrict__ xq1,
                                                  const float4* __restrict__ xs1, TY1* __restrict__ y1, int acc1, int N2, int K2,
                                                  long long rows2, long long row02, const unsigned char* __restrict__ w2,
                                                  const signed char* __restrict__ xq2, const float4* __restrict__ xs2,
                                                  TY2* __restrict__ y2, int acc2) {
  pdl_wait();
  if ((int)blockIdx.x < nb1) {
    qgemv_rows<TY1, QT1, R, SW1, NW1, SPLIT1>(blockIdx.x, N1, K1, rows1, row01, w1, QX{xq1, xs1, K1}, y1, acc1);
  } else {
    qgemv_rows<TY2, QT2, R, SW2, NW2, SPLIT2>(blockIdx.x - nb1, N2, K2, rows2, row02, w2, QX{xq2, xs2, K2}, y2, acc2);
  }
}

// qgemv_split is qgemv (no SwiGLU, no accumulation) writing its columns
// to up to four outputs (SplitY): a batched decode step's q, k, v and
// gate in one launch where the prefill schedule lays them out apart. Each
// value is qgemv's of the same shape: the same bits.
template <typename TY, int QT, int R, int NW, int SPLIT>
__global__ void __launch_bounds__(256) qgemv_split(int N, int K, long long rows, long long row0, const unsigned char* __restrict__ w,
                                                   const signed char* __restrict__ xq, const float4* __restrict__ xs, TY* y0,
                                                   TY* y1, TY* y2, TY* y3, int end0, int end1, int end2) {
  pdl_wait();
  const SplitY<TY> sy{{y0, y1, y2, y3}, {end0, end1, end2}};
  qgemv_rows<TY, QT, R, 0, NW, SPLIT, false, true>(blockIdx.x, N, K, rows, row0, w, QX{xq, xs, K}, y0, 0, &sy);
}

// qgemv_xin is q8x_quantize of x [R, K] then qgemv, in one launch: every
// block quantises all of x into its dynamic shared memory (xs float4
// [R*K/32], then xq int8 [R*K]: R*K*3/2 bytes) with q8x_group, as
// q8x_quantize does, so the GEMV reads the same bytes and y gets the same
// bits. For small R*K (lower.QGEMVXInMax): the quantisation is repeated in
// every block. y must lie apart from x (other blocks may store y while one
// still reads x).
// qgemv_xin_quant quantises x into the block's shared memory (xs, then
// xq) and returns that copy; CG reads x through L2 only (ld.global.cg:
// qgemv_xin_norm_pre reads it before griddepcontrol.wait, where this SM's
// L1 may hold an older line of the buffer).
template <int R, bool CG, typename TX> __device__ __forceinline__ QX qgemv_xin_quant(int K, const TX* __restrict__ x) {
  extern __shared__ __align__(16) unsigned char qgemv_xin_smem[];
  float4* xs = reinterpret_cast<float4*>(qgemv_xin_smem);
  const int groups = R * (K / 32);
  signed char* xq = reinterpret_cast<signed char*>(xs + groups);
  // A warp loads its groups (up to 8 a round) before quantising any: one
  // round of load latency, not one a group.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g0 = warp; g0 < groups; g0 += 64) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int g = g0 + 8 * i;
      v[i] = g >= groups ? 0.f : CG ? norm_ld1<true>(x + (long long)g * 32 + lane) : to_f32(x[(long long)g * 32 + lane]);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int g = g0 + 8 * i;
      if (g < groups) {  // uniform in the warp
        float4 sc;
        xq[g * 32 + lane] = (signed char)q8x_group(v[i], sc);
        if (lane == 0) xs[g] = sc;
      }
    }
  }
  __syncthreads();
  return QX{xq, xs, K};
}

template <typename TY, typename TX, int QT, int R, int SWIGLU, int NW, int SPLIT>
__device__ __forceinline__ void qgemv_xin_body(int N, int K, long long rows, long long row0, const unsigned char* __restrict__ w,
                                               const TX* __restrict__ x, TY* __restrict__ y, int accumulate) {
  const QX xv = qgemv_xin_quant<R, false>(K, x);
  qgemv_rows<TY, QT, R, SWIGLU, NW, SPLIT>(blockIdx.x, N, K, rows, row0, w, xv, y, accumulate);
}

template <typename TY, typename TX, int QT, int R, int SWIGLU, int NW, int SPLIT>
__global__ void __launch_bounds__(256) qgemv_xin(int N, int K, long long rows, long long row0, const unsigned char* __restrict__ w,
                                                 const TX* __restrict__ x, TY* __restrict__ y, int accumulate) {
  pdl_wait();
  qgemv_xin_body<TY, TX, QT, R, SWIGLU, NW, SPLIT>(N, K, rows, row0, w, x, y, accumulate);
}

// qgemv_norm and qgemv_xin_norm are qgemv and qgemv_xin followed by the
// norm of y's row as its launch would compute it (norm_tail, norm.cu, of
// `lanes` threads: the same bits), one launch fewer: a block stores its
// outputs, then counts itself done at counter; the last one runs the norm
// once every block's y is stored and returns counter to 0 (it is 0 before
// the launch). n values at x (the norm of y: x is y) or, with TAIL bit 1,
// at sum = a + b (y is a or b); TAIL bit 0 also quantises out into nxq,
// nxs. The norm's outputs may lie over the GEMV's inputs (its quantised
// activations): every block has read them when the last one starts.
// Only w is __restrict__: y is the norm's input, xq or x its output.
template <typename TY, typename TO, int TAIL>
__device__ __forceinline__ void qgemv_tail(unsigned int* counter, int n, int lanes, float eps, const TY* x, const TY* a,
                                           const TY* b, TY* sum, const float* nw, TO* out, signed char* nxq, float4* nxs) {
  if (!last_block(counter, gridDim.x)) return;
  norm_tail<TY, TO, (TAIL & 1) != 0, (TAIL & 2) != 0>(n, eps, lanes, x, nw, out, nxq, nxs, a, b, sum);
}

template <typename TY, typename TO, int QT, int R, int SWIGLU, int NW, int SPLIT, int TAIL>
__global__ void __launch_bounds__(256, LAGC_MINB(3)) qgemv_norm(int N, int K, long long rows, long long row0, const unsigned char* __restrict__ w,
                                                  const signed char* xq, const float4* xs, TY* y, int accumulate,
                                                  unsigned int* counter, int n, int lanes, float eps, const TY* x,
                                                  const TY* a, const TY* b, TY* sum, const float* nw, TO* out,
                                                  signed char* nxq, float4* nxs) {
  pdl_wait();
  qgemv_rows<TY, QT, R, SWIGLU, NW, SPLIT>(blockIdx.x, N, K, rows, row0, w, QX{xq, xs, K}, y, accumulate);
  qgemv_tail<TY, TO, TAIL>(counter, n, lanes, eps, x, a, b, sum, nw, out, nxq, nxs);
}

template <typename TY, typename TX, typename TO, int QT, int R, int SWIGLU, int NW, int SPLIT, int TAIL>
__global__ void __launch_bounds__(256, LAGC_MINB(3)) qgemv_xin_norm(int N, int K, long long rows, long long row0,
                                                      const unsigned char* __restrict__ w, const TX* xin, TY* y,
                                                      int accumulate, unsigned int* counter, int n, int lanes, float eps,
                                                      const TY* x, const TY* a, const TY* b, TY* sum, const float* nw,
                                                      TO* out, signed char* nxq, float4* nxs) {
  pdl_wait();
  qgemv_xin_body<TY, TX, QT, R, SWIGLU, NW, SPLIT>(N, K, rows, row0, w, xin, y, accumulate);
  qgemv_tail<TY, TO, TAIL>(counter, n, lanes, eps, x, a, b, sum, nw, out, nxq, nxs);
}

// qgemv_xin_norm_pre is qgemv_xin_norm with its GEMV's reads and dot
// products before griddepcontrol.wait, its stores and norm after: for a
// launch whose w and xin the launch before it does not write, and whose
// xin an earlier launch wrote (lower.XInPre checks both), where that
// launch lets it start early (moe_down_qgemv_trig): the GEMV then runs
// beside that launch's last blocks. The same loads, sums and stores in
// the same order: the same bits.
template <typename TY, typename TX, typename TO, int QT, int R, int SWIGLU, int NW, int SPLIT, int TAIL>
__global__ void __launch_bounds__(256, LAGC_MINB(3)) qgemv_xin_norm_pre(int N, int K, long long rows, long long row0,
                                                          const unsigned char* __restrict__ w, const TX* xin, TY* y,
                                                          int accumulate, unsigned int* counter, int n, int lanes, float eps,
                                                          const TY* x, const TY* a, const TY* b, TY* sum, const float* nw,
                                                          TO* out, signed char* nxq, float4* nxs) {
  const QX xv = qgemv_xin_quant<R, true>(K, xin);
  qgemv_rows<TY, QT, R, SWIGLU, NW, SPLIT, true>(blockIdx.x, N, K, rows, row0, w, xv, y, accumulate);
  qgemv_tail<TY, TO, TAIL>(counter, n, lanes, eps, x, a, b, sum, nw, out, nxq, nxs);
}

// qgemv_join_norm is qgemv_xin_norm_pre's store and tail after its GEMV ran
// elsewhere (moe_gateup_qgemv_xin_trig): s holds the GEMV's f32 sums, and
// y[i] = s[i] + y[i] rounded to TY is the accumulating store's value (one
// add either way), then norm_tail as that launch's last block runs it, by
// this one block: the same bits. ny: the values of y. Where the norm adds
// y itself (b is y, all of it) on its one-load path, each thread makes
// its chunks' y values there (norm_tail's JOIN), so the block reads its
// inputs once; else y is stored first, fenced, and read again. y is read
// through L2 (the launch before stored it). LAGC_JOIN_TWO_PASS forces the
// second form, for A/B runs.
template <typename TY, typename TO, int TAIL>
__global__ void __launch_bounds__(256) qgemv_join_norm(int ny, const float* __restrict__ s, TY* y, int n, int lanes,
                                                     float eps, const TY* x, const TY* a, const TY* b, TY* sum,
                                                     const float* nw, TO* out, signed char* nxq, float4* nxs) {
  pdl_wait();
  // The launch after (the next layer's first GEMV) may start now: its
  // blocks, nearly all of which fit beside this one, are resident when it
  // ends (measured with this trigger; LAGC_JOIN_NO_TRIGGER through
  // LAGC_NVRTC_OPTIONS leaves it out, for A/B runs). Its own wait still
  // orders its reads after this launch.
#ifndef LAGC_JOIN_NO_TRIGGER
  pdl_trigger();
#endif
#ifndef LAGC_JOIN_TWO_PASS
  if constexpr ((TAIL & 2) != 0) {
    if (b == y && ny == n && norm_aligned(y, s, a) && norm_tail_one(n, lanes, blockDim.x >> 5, sum, nw, out)) {
      norm_tail<TY, TO, (TAIL & 1) != 0, true, true>(n, eps, lanes, x, nw, out, nxq, nxs, a, b, sum, s);
      return;
    }
  }
#endif
  for (int i = threadIdx.x; i < ny; i += blockDim.x) y[i] = from_f32<TY>(s[i] + norm_ld1<true>(y + i));
  __threadfence();
  __syncthreads();
  norm_tail<TY, TO, (TAIL & 1) != 0, (TAIL & 2) != 0>(n, eps, lanes, x, nw, out, nxq, nxs, a, b, sum);
}

// ------------------------------------------ routed experts (decode)
//
// moe_gateup_qgemv and moe_down_qgemv are the quantised routed experts of
// up to 8 decode tokens, two launches with the activations quantised inside
// them. A lane's share of a weight row is its units lane, lane+32, ...
// (as in qgemv), summed in that order, and a warp's lanes are summed by
// warp_sum_q: a row's result depends on the shapes alone, never on the
// number of tokens, the other routes or the rows in flight per round.

// block_copy16: the block's threads copy n 16-byte vectors from src to
// dst (shared memory) asynchronously; cp_async_wait_all and a barrier
// make them visible.
__device__ __forceinline__ void block_copy16(void* dst, const void* src, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    cp_async16(static_cast<uint4*>(dst) + i, static_cast<const uint4*>(src) + i);
}

// stage_rows: the bytes the units of n consecutive rows share (QW's SA
// bytes and HEAD bytes per block), from row `row` of a [rows, K] matrix at
// w, into sa (n*nb*SA bytes) and sh (n*nb*HEAD) of shared memory by the
// block's threads: asynchronous copies, or 2-byte loads where a run of
// heads is not 16-byte aligned.
template <int QT>
__device__ __forceinline__ void stage_rows(unsigned char* sa, unsigned char* sh, const unsigned char* w, long long rows,
                                           long long row, int n, int K) {
  using Q = QW<QT>;
  const int nb = K / Q::BE;
  if constexpr (Q::SA > 0) {
    constexpr int P = Q::SA / 16;
    const unsigned char* body = w + row * nb * Q::BODY + Q::SAOFF;
    for (int i = threadIdx.x; i < n * nb * P; i += blockDim.x) {
      const int blk = i / P;
      cp_async16(sa + 16 * i, body + (long long)blk * Q::BODY + 16 * (i - blk * P));
    }
  }
  const unsigned char* head = w + align256(rows * nb * Q::BODY) + row * nb * Q::HEAD;
  const int hb = n * nb * Q::HEAD;
  if (((reinterpret_cast<unsigned long long>(head) | (unsigned long long)hb) & 15) == 0)
    block_copy16(sh, head, hb / 16);
  else
    for (int i = threadIdx.x; i < hb / 2; i += blockDim.x)
      reinterpret_cast<unsigned short*>(sh)[i] = __ldg(reinterpret_cast<const unsigned short*>(head) + i);
}

// act[r, i] = silu(gate_e[i] . x_t) * (up_e[i] . x_t) for route r = t*k+j,
// e = ids[r], written quantised as q8x_quantize would (aq int8 [R, I], as
// [R, I/32]); x arrives quantised (xq int8 [T, H], xs [T, H/32], as
// q8x_quantize writes it, usually by the norm before: quantising it here,
// in every block, took a third of the kernel's time). A block of W warps
// (4 or 8) takes 32 consecutive i of one route (a group of act), 32/W per
// warp: its gate rows, then its up rows, G rows at a time, each lane with one unit
// of each of the G rows per round (quant bytes only: the rows' shared bytes
// are staged). NS = 0: a round's units are loaded into registers once the
// round before is summed; NS = 1: into a second set of registers before it
// is summed (two rounds in flight); NS >= 2: copied into shared memory NS-1 rounds
// ahead (the same sums in the same order: the same bits). Dynamic shared
// memory: x_t's scales (float4 [H/32]) and int8 values ([H]), then the
// staged bytes (stage_rows) of the block's 32 gate rows and 32 up rows,
// then (NS >= 2), from the next 256-byte boundary, each warp's ring of NS
// x G x 32 units of Q::QB bytes. The gate stack's E*I rows start at
// row gate_row0 of a matrix of gate_rows rows, the up stack's likewise
// (one matrix holding both, or two). An invalid id gets a zero group
// (moe_down_qgemv skips the route).
// OFF: the block's index is blockIdx.x - boff (moe_gateup_qgemv_xin_trig,
// whose first boff blocks do other work); without it blockIdx.x as read,
// which keeps the other launches' code as it was.
template <int QT, int G, int W, int NS, bool OFF = false>
__device__ __forceinline__ void moe_gateup_body(int k, int H, int I, int E, const signed char* __restrict__ xqg,
                                                const float4* __restrict__ xsg, const int* __restrict__ ids,
                                                const unsigned char* __restrict__ gate, long long gate_rows, long long gate_row0,
                                                const unsigned char* __restrict__ up, long long up_rows, long long up_row0,
                                                signed char* __restrict__ aq, float4* __restrict__ as, int boff = 0) {
  using Q = QW<QT>;
  constexpr int NI = 32 / W, NG = 2 * NI / G;
  static_assert((W == 4 || W == 8) && (2 * NI) % G == 0, "4 or 8 warps; G must divide a warp's rows");
  static_assert(NS >= 0 && NS <= 4, "registers (0, 1) or 2 to 4 stages");
  extern __shared__ __align__(16) unsigned char qmoe_smem[];
  __shared__ float sums[2][32];  // the block's gate and up rows
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int groups = I / 32;
  const unsigned blk = OFF ? blockIdx.x - boff : blockIdx.x;  // unsigned as blockIdx.x: the same divisions
  const int r = blk / groups, i0 = (blk - r * groups) * 32;
  const long long o = (long long)r * I + i0;
  const int e = ids[r];
  if (e < 0 || e >= E) {  // uniform over the block
    if (warp == 0) {
      aq[o + lane] = 0;
      if (lane == 0) as[o / 32] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    return;
  }
  const int U = H / 32, S = (U + 31) / 32, nb = H / Q::BE;
  float4* xs = reinterpret_cast<float4*>(qmoe_smem);
  signed char* xq = reinterpret_cast<signed char*>(xs + U);
  unsigned char* sa = reinterpret_cast<unsigned char*>(xq + H);
  unsigned char* sh = sa + 64 * nb * Q::SA;
  const long long grow = gate_row0 + (long long)e * I + i0, urow = up_row0 + (long long)e * I + i0;
  // the matrix and row of the warp's row n (its gate rows, then its up rows)
  auto mat = [&](int n) { return n < NI ? gate : up; };
  auto row = [&](int n) { return n < NI ? grow + NI * warp + n : urow + NI * warp + n - NI; };
  auto stage = [&](int n) { return n < NI ? NI * warp + n : 32 + NI * warp + n - NI; };  // its place in the stage
  auto stage_shared = [&]() {
    stage_rows<QT>(sa, sh, gate, gate_rows, grow, 32, H);
    stage_rows<QT>(sa + 32 * nb * Q::SA, sh + 32 * nb * Q::HEAD, up, up_rows, urow, 32, H);
    const long long t = r / k;
    block_copy16(xs, xsg + t * U, U);
    block_copy16(xq, xqg + t * H, H / 16);
  };
  auto store = [&](int g, const float (&acc)[G]) {
#pragma unroll
    for (int q = 0; q < G; q++) {
      const int n = g * G + q;
      const float v = warp_sum_q(acc[q]);
      if (lane == 0) sums[n < NI ? 0 : 1][NI * warp + (n < NI ? n : n - NI)] = v;
    }
  };
  const QX xsm{xq, xs, H};
  typename Q::W wv[G], wn[NS == 1 ? G : 1];
  // NS = 0: round (g, s), the warp's rows g*G .. g*G+G-1 at unit lane +
  // 32s, is loaded into registers (v: wv, or wn for NS = 1) after round
  // (g, s-1) is summed; NS = 1: before.
  auto load = [&](typename Q::W* v, int g, int s) {
    const int u = lane + 32 * s;
    if (u < U)
#pragma unroll
      for (int q = 0; q < G; q++) Q::loadq(v[q], mat(g * G + q), row(g * G + q), H, u);
  };
  // NS >= 2: each lane copies its own units (cp.async) NS-1 rounds ahead
  // into its slots of an NS-stage ring after the staged bytes, so that
  // loads stay in flight while it sums; a lane reads only its own slots,
  // no barrier in the loop. (ig, is): the next round to copy; counters,
  // not divisions.
  unsigned char* ring = qmoe_smem + align256(sh + 64 * nb * Q::HEAD - qmoe_smem) + warp * NS * G * 32 * Q::QB + lane * Q::QB;
  int ig = 0, is = 0, islot = 0, slot = 0;
  auto issue = [&]() {
    if (ig < NG) {
      const int u = lane + 32 * is;
      if (u < U)
#pragma unroll
        for (int q = 0; q < G; q++) Q::copyq(ring + (islot * G + q) * 32 * Q::QB, mat(ig * G + q), row(ig * G + q), H, u);
      if (++is == S) is = 0, ig++;
    }
    islot = islot + 1 == NS ? 0 : islot + 1;
    cp_async_commit();  // possibly empty: one group a round
  };
  if constexpr (NS <= 1)
    load(wv, 0, 0);
  else
#pragma unroll
    for (int p = 0; p < NS - 1; p++) issue();
  stage_shared();
  cp_async_wait_all();
  __syncthreads();
#pragma unroll
  for (int g = 0; g < NG; g++) {
    float acc[G];
#pragma unroll
    for (int q = 0; q < G; q++) acc[q] = 0.f;
    for (int s = 0; s < S; s++) {
      if constexpr (NS == 1) {
        if (s + 1 < S)
          load(wn, g, s + 1);
        else if (g + 1 < NG)
          load(wn, g + 1, 0);
      }
      if constexpr (NS >= 2) {
        issue();
        cp_async_wait<NS - 1>();  // round (g, s)'s copies (this lane's) have landed
      }
      const int u = lane + 32 * s;
      if (u < U) {
        const typename Q::X xv = Q::xload(xsm, 0, u);
#pragma unroll
        for (int q = 0; q < G; q++) {
          const int br = stage(g * G + q);
          if constexpr (NS >= 2) Q::fromq(wv[q], ring + (slot * G + q) * 32 * Q::QB);
          Q::loads(wv[q], sa + br * nb * Q::SA, sh + br * nb * Q::HEAD, u);
          acc[q] += Q::dot(wv[q], xv, u);
        }
      }
      if constexpr (NS == 0) {
        if (s + 1 < S)
          load(wv, g, s + 1);
        else if (g + 1 < NG)
          load(wv, g + 1, 0);
      } else if constexpr (NS == 1) {
#pragma unroll
        for (int q = 0; q < G; q++) wv[q] = wn[q];
      } else {
        slot = slot + 1 == NS ? 0 : slot + 1;
      }
    }
    store(g, acc);
  }
  __syncthreads();
  if (warp == 0) {
    float4 sc;
    aq[o + lane] = (signed char)q8x_group(silu_q(sums[0][lane]) * sums[1][lane], sc);
    if (lane == 0) as[o / 32] = sc;
  }
}

// Three blocks an SM whatever W: a decode step's blocks (S-2.1: 320) then
// run in one wave on 8 warps too, which lower chooses for the k-quants.
template <int QT, int G, int W, int NS>
__global__ void __launch_bounds__(32 * W, LAGC_MINB(3)) moe_gateup_qgemv(int k, int H, int I, int E, const signed char* __restrict__ xqg,
                                                          const float4* __restrict__ xsg, const int* __restrict__ ids,
                                                          const unsigned char* __restrict__ gate, long long gate_rows,
                                                          long long gate_row0, const unsigned char* __restrict__ up,
                                                          long long up_rows, long long up_row0, signed char* __restrict__ aq,
                                                          float4* __restrict__ as) {
  pdl_wait();
  moe_gateup_body<QT, G, W, NS>(k, H, I, E, xqg, xsg, ids, gate, gate_rows, gate_row0, up, up_rows, up_row0, aq, as);
}

// moe_gateup_qgemv_trig is moe_gateup_qgemv letting the launch after it
// (moe_down_qgemv_pre, lower.DownPre) start once every block has passed
// its wait.
template <int QT, int G, int W, int NS>
__global__ void __launch_bounds__(32 * W, LAGC_MINB(3))
    moe_gateup_qgemv_trig(int k, int H, int I, int E, const signed char* __restrict__ xqg, const float4* __restrict__ xsg,
                          const int* __restrict__ ids, const unsigned char* __restrict__ gate, long long gate_rows,
                          long long gate_row0, const unsigned char* __restrict__ up, long long up_rows, long long up_row0,
                          signed char* __restrict__ aq, float4* __restrict__ as) {
  pdl_wait();
  pdl_trigger();
  moe_gateup_body<QT, G, W, NS>(k, H, I, E, xqg, xsg, ids, gate, gate_rows, gate_row0, up, up_rows, up_row0, aq, as);
}

// moe_gateup_qgemv_xin_trig is moe_gateup_qgemv_trig with a decode
// layer's shared-expert down GEMV (one row of activations x, quantised in
// the block as qgemv_xin does) as its first nsb blocks, its f32 sums to s
// (lower.SharedDownGateUp): qgemv_xin_norm_pre's sums, whose store, residual
// add and norm then run in qgemv_join_norm after the routed down. The GEMV
// reads only x (written before this launch) and its weights, and the
// launch already has a wave's room for it: its blocks fill the SMs' slots
// the gate+up's leave, where qgemv_xin_norm_pre's found room for 12 of
// 384 beside the routed down (lagc plan --resources). 8 warps (qgemv_rows'
// and qgemv_xin_quant's block).
template <typename TX, int QT, int G, int W, int NS, int SQT, int SNW>
__global__ void __launch_bounds__(32 * W, LAGC_MINB(3))
    moe_gateup_qgemv_xin_trig(int k, int H, int I, int E, const signed char* __restrict__ xqg, const float4* __restrict__ xsg,
                              const int* __restrict__ ids, const unsigned char* __restrict__ gate, long long gate_rows,
                              long long gate_row0, const unsigned char* __restrict__ up, long long up_rows, long long up_row0,
                              signed char* __restrict__ aq, float4* __restrict__ as, int nsb, int sN, int sK, long long srows,
                              long long srow0, const unsigned char* __restrict__ sw, const TX* __restrict__ x, float* __restrict__ s) {
  pdl_wait();
  static_assert(W == 8, "qgemv_rows and qgemv_xin_quant take blocks of 8 warps");
  pdl_trigger();
  if ((int)blockIdx.x < nsb) {
    const QX xv = qgemv_xin_quant<1, false>(sK, x);
    qgemv_rows<float, SQT, 1, 0, SNW, 1>(blockIdx.x, sN, sK, srows, srow0, sw, xv, s, 0);
    return;
  }
  moe_gateup_body<QT, G, W, NS, true>(k, H, I, E, xqg, xsg, ids, gate, gate_rows, gate_row0, up, up_rows, up_row0, aq, as, nsb);
}

// The most routes per token moe_down_qgemv takes.
#define QMOE_MAX_K 64

// out[t, h] = sum_j weights[t,j] * (down_e[h] . act[t*k+j]) (+ out), act
// quantised (aq int8 [T*k, I], as [T*k, I/32]); down is a stack of E*H
// rows of I from row row0 of a matrix of `rows` rows. A block of W warps
// (4 or 8) takes W*NH consecutive h of one token, NH per warp. The k slots' units
// are one sequence over the lanes (unit v is unit v % (I/32) of slot
// v / (I/32)), SD of them per lane per round for the NH rows together, so
// loads of several slots and rows are in flight at once; a slot with an
// invalid id is skipped. ALL = 1: instead, every unit of a lane (for its NH
// rows) is copied into shared memory at once, with one wait (one round
// trip; SD unused). Dynamic shared memory: the token's quantised
// activations (scales float4 [k*I/32], int8 [k*I]), copied before the ids
// arrive, then the staged bytes (stage_rows) of the block's rows of each
// slot's expert, then (ALL) from the next 256-byte boundary each warp's
// ceil(k*I/1024) x NH x 32 units of Q::QB bytes.
// PRE (moe_down_qgemv_pre): the ids, routing weights, staged bytes and the
// first round of weights before griddepcontrol.wait (the ids and weights
// through L2: the router two launches before wrote them), the activations
// (the launch before's) after it; TRIG then launch_dependents.
template <typename TY, int QT, int NH, int SD, int W, int ALL, bool PRE = false, bool TRIG = false>
__device__ __forceinline__ void moe_down_body(int k, int H, int I, int E, long long rows, long long row0,
                                              const signed char* __restrict__ aq, const float4* __restrict__ as,
                                              const float* __restrict__ weights, const int* __restrict__ ids,
                                              const unsigned char* __restrict__ down, TY* __restrict__ out, int accumulate) {
  using Q = QW<QT>;
  static_assert(W == 4 || W == 8, "4 or 8 warps");
  static_assert(!PRE || !ALL, "the early loads are the register path's");
  constexpr int HB = W * NH;  // rows of a block
  extern __shared__ __align__(16) unsigned char qmoe_smem[];
  __shared__ int se[QMOE_MAX_K];  // slot j's expert, -1 for an invalid id
  __shared__ float sw[QMOE_MAX_K];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int per = (H + HB - 1) / HB;
  const int t = blockIdx.x / per;
  const int hb0 = (blockIdx.x - t * per) * HB, h0 = hb0 + warp * NH;
  const int U = I / 32, nv = k * U, nb = I / Q::BE;
  float4* ast = reinterpret_cast<float4*>(qmoe_smem);
  signed char* aqt = reinterpret_cast<signed char*>(ast + nv);
  unsigned char* sa = reinterpret_cast<unsigned char*>(aqt + k * I);
  unsigned char* sh = sa + k * HB * nb * Q::SA;
  if constexpr (!PRE) {
    block_copy16(ast, as + (long long)t * nv, nv);
    block_copy16(aqt, aq + (long long)t * k * I, k * I / 16);
  }
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    const int e = PRE ? __ldcg(ids + t * k + j) : ids[t * k + j];
    se[j] = e >= 0 && e < E ? e : -1;
    sw[j] = PRE ? __ldcg(weights + t * k + j) : weights[t * k + j];
  }
  __syncthreads();
  for (int j = 0; j < k; j++)
    if (se[j] >= 0) stage_rows<QT>(sa + j * HB * nb * Q::SA, sh + j * HB * nb * Q::HEAD, down, rows, row0 + (long long)se[j] * H + hb0, min(HB, H - hb0), I);
  int hq[NH];  // the warp's rows in the block; past H: a valid row, result unused
#pragma unroll
  for (int q = 0; q < NH; q++) hq[q] = min(h0 + q, H - 1) - hb0;
  float acc[NH];
#pragma unroll
  for (int q = 0; q < NH; q++) acc[q] = 0.f;
  if constexpr (ALL) {
    // Every unit of the lane (lane, lane+32, ...) copied into shared memory
    // at once, one wait, then summed in the same order: the same bits.
    const int nu = (nv + 31) / 32;
    unsigned char* mine = qmoe_smem + align256(sh + k * HB * nb * Q::HEAD - qmoe_smem) + (warp * nu * NH * 32 + lane) * Q::QB;
    for (int i = 0; i < nu; i++) {
      const int v = lane + 32 * i, j = min(v / U, k - 1), u = v - j * U, e = se[j];
      if (v < nv && e >= 0)
#pragma unroll
        for (int q = 0; q < NH; q++) Q::copyq(mine + (i * NH + q) * 32 * Q::QB, down, row0 + (long long)e * H + hb0 + hq[q], I, u);
    }
    cp_async_wait_all();
    __syncthreads();
    typename Q::W wv;
    // unit lane + 32i is unit u of slot j: stepped, not divided
    for (int i = 0, j = lane / U, u = lane - (lane / U) * U; i < nu && j < k; i++) {
      if (se[j] >= 0) {
        const typename Q::X xv = Q::xload(QX{aqt + j * I, ast + j * U, I}, 0, u);
        const float wt = sw[j];
#pragma unroll
        for (int q = 0; q < NH; q++) {
          const int br = j * HB + hq[q];
          Q::fromq(wv, mine + (i * NH + q) * 32 * Q::QB);
          Q::loads(wv, sa + br * nb * Q::SA, sh + br * nb * Q::HEAD, u);
          acc[q] = fmaf(wt, Q::dot(wv, xv, u), acc[q]);
        }
      }
      for (u += 32; u >= U; u -= U) j++;
    }
  } else {
    typename Q::W wv[SD][NH];
    int jv[SD], uv[SD];
    bool ok[SD];
    auto load = [&](int v0) {
#pragma unroll
      for (int d = 0; d < SD; d++) {
        const int v = v0 + 32 * d;
        jv[d] = min(v / U, k - 1);
        uv[d] = v - jv[d] * U;
        const int e = se[jv[d]];
        ok[d] = v < nv && e >= 0;
        if (ok[d])
#pragma unroll
          for (int q = 0; q < NH; q++) Q::loadq(wv[d][q], down, row0 + (long long)e * H + hb0 + hq[q], I, uv[d]);
      }
    };
    load(lane);
    if constexpr (PRE) {
      pdl_wait();
      if constexpr (TRIG) pdl_trigger();
      block_copy16(ast, as + (long long)t * nv, nv);
      block_copy16(aqt, aq + (long long)t * k * I, k * I / 16);
    }
    cp_async_wait_all();
    __syncthreads();
    for (int v0 = lane; v0 < nv; v0 += 32 * SD) {
#pragma unroll
      for (int d = 0; d < SD; d++)
        if (ok[d]) {
          const int j = jv[d];
          const QX xj{aqt + (long long)j * I, ast + (long long)j * U, I};
          const typename Q::X xv = Q::xload(xj, 0, uv[d]);
          const float wt = sw[j];
#pragma unroll
          for (int q = 0; q < NH; q++) {
            const int br = j * HB + hq[q];  // the row's place in the stage
            Q::loads(wv[d][q], sa + br * nb * Q::SA, sh + br * nb * Q::HEAD, uv[d]);
            acc[q] = fmaf(wt, Q::dot(wv[d][q], xv, uv[d]), acc[q]);
          }
        }
      if (v0 + 32 * SD < nv) load(v0 + 32 * SD);
    }
  }
#pragma unroll
  for (int q = 0; q < NH; q++) {
    const float sum = warp_sum_q(acc[q]);
    if (lane == 0 && h0 + q < H) {
      const long long o = (long long)t * H + h0 + q;
      float v = sum;
      if (accumulate) v += to_f32(out[o]);
      out[o] = from_f32<TY>(v);
    }
  }
}

template <typename TY, int QT, int NH, int SD, int W, int ALL>
__global__ void __launch_bounds__(32 * W, LAGC_MINB(W == 4 ? 3 : 2)) moe_down_qgemv(int k, int H, int I, int E, long long rows, long long row0,
                                                        const signed char* __restrict__ aq, const float4* __restrict__ as,
                                                        const float* __restrict__ weights, const int* __restrict__ ids,
                                                        const unsigned char* __restrict__ down, TY* __restrict__ out,
                                                        int accumulate) {
  pdl_wait();
  moe_down_body<TY, QT, NH, SD, W, ALL>(k, H, I, E, rows, row0, aq, as, weights, ids, down, out, accumulate);
}

// moe_down_qgemv_trig is moe_down_qgemv letting the launch after it start
// once every block has passed its wait (griddepcontrol.launch_dependents),
// rather than as its blocks exit: for a qgemv_xin_norm_pre after it, whose
// GEMV then runs beside this launch's last blocks (lower.XInPre). The
// launch after still waits for this one to complete before touching what
// it writes.
template <typename TY, int QT, int NH, int SD, int W, int ALL>
__global__ void __launch_bounds__(32 * W, LAGC_MINB(W == 4 ? 3 : 2))
    moe_down_qgemv_trig(int k, int H, int I, int E, long long rows, long long row0, const signed char* __restrict__ aq,
                        const float4* __restrict__ as, const float* __restrict__ weights, const int* __restrict__ ids,
                        const unsigned char* __restrict__ down, TY* __restrict__ out, int accumulate) {
  pdl_wait();
  pdl_trigger();
  moe_down_body<TY, QT, NH, SD, W, ALL>(k, H, I, E, rows, row0, aq, as, weights, ids, down, out, accumulate);
}

// moe_down_qgemv_pre is moe_down_qgemv with its ids, staged bytes and first
// round of weights asked for before griddepcontrol.wait, the activations
// after it (lower.DownPre: after a moe_gateup_qgemv_trig, which lets it
// start once every gate+up block has passed its wait; what it reads early
// the router, two launches before, wrote). TRIG: as moe_down_qgemv_trig
// too, after its wait. The same loads and sums: the same bits.
template <typename TY, int QT, int NH, int SD, int W, int ALL, int TRIG>
__global__ void __launch_bounds__(32 * W, LAGC_MINB(W == 4 ? 3 : 2))
    moe_down_qgemv_pre(int k, int H, int I, int E, long long rows, long long row0, const signed char* __restrict__ aq,
                       const float4* __restrict__ as, const float* __restrict__ weights, const int* __restrict__ ids,
                       const unsigned char* __restrict__ down, TY* __restrict__ out, int accumulate) {
  moe_down_body<TY, QT, NH, SD, W, ALL, true, TRIG != 0>(k, H, I, E, rows, row0, aq, as, weights, ids, down, out, accumulate);
}

// ---------------------------------------------------------- dequantiser

// QD<QT>::group writes the 32 floats of group g (elements 32g..32g+31) of
// a row.
template <int QT> struct QD;
template <> struct QD<QT_Q8_0> {
  static __device__ void group(const unsigned char* w, long long rows, long long row, int K, int g, float* o) {
    // 32 quants, 32-byte aligned (K is a multiple of 32): two 16-byte loads.
    const uint4* qs = reinterpret_cast<const uint4*>(w + row * K + 32LL * g);
    const float d = f16_bits(reinterpret_cast<const unsigned short*>(w + align256(rows * K))[row * (K / 32) + g]);
    const uint4 a = qs[0], b = qs[1];
    const unsigned words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = d * (float)(signed char)(words[i / 4] >> (8 * (i % 4)));
  }
};
template <int QT> struct QDK45 {
  static __device__ void group(const unsigned char* w, long long rows, long long row, int K, int g, float* o) {
    const int nb = K / 256;
    const int b = g / 8, s = g % 8, j = s / 2;
    const long long bi = row * nb + b;
    const unsigned char* blk = w + bi * QWK45<QT>::BYTES;
    const unsigned short* dd = reinterpret_cast<const unsigned short*>(w + align256(rows * nb * QWK45<QT>::BYTES)) + 2 * bi;
    const float d = f16_bits(dd[0]), dmin = f16_bits(dd[1]);
    const float sc = d * (float)blk[s], m = dmin * (float)blk[8 + s];
    // The 32 quant bytes are 16-byte aligned (blocks of 144 or 176 bytes,
    // bodies at 16 or 48): two 16-byte loads.
    const uint4* qv = reinterpret_cast<const uint4*>(blk + (QT == QT_Q4_K ? 16 : 48) + 32 * j);
    const uint4 a = qv[0], bq = qv[1];
    const unsigned words[8] = {a.x, a.y, a.z, a.w, bq.x, bq.y, bq.z, bq.w};
#pragma unroll
    for (int l = 0; l < 32; l++) {
      const unsigned byte = (words[l / 4] >> (8 * (l % 4))) & 0xFF;
      int q = (s & 1) ? (int)(byte >> 4) : (int)(byte & 0xF);
      if (QT == QT_Q5_K) q += ((blk[16 + l] >> s) & 1) << 4;
      o[l] = sc * (float)q - m;
    }
  }
};
template <> struct QD<QT_Q4_K> : QDK45<QT_Q4_K> {};
template <> struct QD<QT_Q5_K> : QDK45<QT_Q5_K> {};
template <> struct QD<QT_Q6_K> {
  static __device__ void group(const unsigned char* w, long long rows, long long row, int K, int g, float* o) {
    const int nb = K / 256;
    const int b = g / 8, e0 = 32 * (g % 8);  // element within the block
    const long long bi = row * nb + b;
    const unsigned char* body = w + bi * 208;
    const float d = f16_bits(reinterpret_cast<const unsigned short*>(w + align256(rows * nb * 208))[bi]);
    const signed char* sc = reinterpret_cast<const signed char*>(body + 192);
    for (int i = 0; i < 32; i++) {
      const int e = e0 + i, half = e / 128, rem = e % 128, grp = rem / 32, l = rem % 32;
      const unsigned char lq = body[64 * half + (grp & 1) * 32 + l];
      const int lo4 = grp < 2 ? (lq & 0xF) : (lq >> 4);
      const int h2 = (body[128 + 32 * half + l] >> (2 * grp)) & 3;
      o[i] = d * (float)sc[8 * half + l / 16 + 2 * grp] * (float)((lo4 | (h2 << 4)) - 32);
    }
  }
};
template <> struct QD<QT_IQ4_XS> {
  static __device__ void group(const unsigned char* w, long long rows, long long row, int K, int g, float* o) {
    const signed char kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    const int nb = K / 256;
    const int b = g / 8, ib = g % 8;
    const long long bi = row * nb + b;
    const unsigned char* qs = w + bi * 128 + 16 * ib;
    const unsigned char* hd = w + align256(rows * nb * 128) + bi * 8;
    const float d = f16_bits((unsigned short)(hd[0] | (hd[1] << 8)));
    const int sh = hd[2] | (hd[3] << 8);
    const int ls = ((hd[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
    const float dl = d * (float)(ls - 32);
    for (int j = 0; j < 16; j++) {
      o[j] = dl * (float)kv[qs[j] & 0xF];
      o[j + 16] = dl * (float)kv[qs[j] >> 4];
    }
  }
};

// store32 writes 32 values to o (64-byte aligned for bf16, 128 for f32)
// in 16-byte stores: the dequantiser is bound by its writes.
__device__ __forceinline__ void store32(float* o, const float* v) {
#pragma unroll
  for (int i = 0; i < 8; i++) reinterpret_cast<float4*>(o)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}
__device__ __forceinline__ void store32(bf16_t* o, const float* v) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    unsigned p[4];
#pragma unroll
    for (int h = 0; h < 4; h++) {
      p[h] = bf16x2_bits(v[8 * i + 2 * h], v[8 * i + 2 * h + 1]);
    }
    reinterpret_cast<uint4*>(o)[i] = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

// out [rows, K] (TY) = the dequantised rows [row0, row0+n) of w.
template <typename TY, int QT>
__global__ void __launch_bounds__(256) qdequant(long long rows, int K, long long row0, long long n,
                                                const unsigned char* __restrict__ w, TY* __restrict__ out) {
  pdl_wait();
  if constexpr (QT == QT_Q8_0 && sizeof(TY) == 2) {
    // q8_0 into bf16 (prefill's copies of the attention and shared expert
    // weights): the rows are one run of int8 and one of scales, so thread
    // i takes values 8i..8i+7 of it, an 8-byte load and a 16-byte store
    // next to its neighbours' (a group a thread, below, strides them by 32
    // and 64 bytes: about half the bandwidth). The same products and
    // rounding as QD<Q8_0>: the same bits. out is 16-byte aligned, as
    // store32 needs too.
    const unsigned char* qs = w + row0 * K;
    const unsigned short* ds = reinterpret_cast<const unsigned short*>(w + align256(rows * K)) + row0 * (K / 32);
    // Four chunks a thread a round, their loads first: bytes in flight.
    const long long chunks = n * K / 8, stride = (long long)gridDim.x * blockDim.x;
    for (long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < chunks; i0 += 4 * stride) {
      uint2 q[4];
      unsigned short db[4];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const long long i = i0 + u * stride;
        if (i < chunks) {
          q[u] = __ldg(reinterpret_cast<const uint2*>(qs) + i);
          db[u] = __ldg(ds + i / 4);
        }
      }
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const long long i = i0 + u * stride;
        if (i >= chunks) break;
        const float d = f16_bits(db[u]);
        unsigned p[4];
#pragma unroll
        for (int h = 0; h < 4; h++) {
          const unsigned word = h < 2 ? q[u].x : q[u].y;
          const int s0 = 16 * (h & 1);
          const float v0 = d * (float)(signed char)(word >> s0), v1 = d * (float)(signed char)(word >> (s0 + 8));
          p[h] = bf16x2_bits(v0, v1);
        }
        reinterpret_cast<uint4*>(out)[i] = make_uint4(p[0], p[1], p[2], p[3]);
      }
    }
    return;
  }
  const long long groups = n * (K / 32);
  LAGC_FOR(i, groups) {
    const long long row = row0 + i / (K / 32);
    const int g = (int)(i % (K / 32));
    float v[32];
    QD<QT>::group(w, rows, row, K, g, v);
    store32(out + (row - row0) * K + 32LL * g, v);
  }
}

// qembedding is embedding (embedding.cu) reading a block-quantised table
// in the device layout: out[t, :] = row tokens[t] of the table, t < ntok,
// each group of 32 dequantised as qdequant does (QD<QT>::group, then
// store32's rounding), so a row has the bits of the table converted to TY
// first. A token outside [0, V) gets a NaN row, as embedding's.
// Grid: (groups of a row / 256 capped, ntok); a thread a group.
template <typename TY, int QT>
__global__ void __launch_bounds__(256) qembedding(int ntok, int H, int V, const int* __restrict__ tokens,
                                                  const unsigned char* __restrict__ w, TY* __restrict__ out) {
  pdl_wait();
  const int t = blockIdx.y;
  if (t >= ntok) return;
  const int id = tokens[t];
  const bool ok = id >= 0 && id < V;
  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < H / 32; g += gridDim.x * blockDim.x) {
    float v[32];
    if (ok) {
      QD<QT>::group(w, V, id, H, g, v);
    } else {
#pragma unroll
      for (int i = 0; i < 32; i++) v[i] = __int_as_float(0x7fc00000);
    }
    store32(out + (long long)t * H + 32LL * g, v);
  }
}

// ------------------------------------------------------ synthetic weights

__device__ __forceinline__ unsigned qhash(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (unsigned)x;
}

// A small positive f16 scale from a hash, in [2^-12, 2^-11): k-quant
// weights up to about 0.5, q8_0 weights up to 0.06.
__device__ __forceinline__ unsigned short qscale(unsigned h) { return (unsigned short)(0x1000 + (h & 0x3FF)); }

// qsynth fills a [rows, K] matrix in the device layout with random quants
// and small positive scales (benchmarks with synthetic weights): one
// thread per block of the type. q4_k's and q5_k's dmin is d times the
// quants' mean (7.5 or 15.5), so that E[d*sc*q] = E[dmin*m] and the
// values average about zero: with dmin as large as d every weight carried
// the same positive offset, every token's hidden state drifted to the
// same direction, and the routers sent all tokens to the same experts
// (quant.Random had the same fault; on the CPU it routed 2048 tokens of
// an 8-layer S-2.1 to 10 of 256 experts a layer, 235-256 once fixed).
template <int QT>
__global__ void __launch_bounds__(256) qsynth(long long rows, int K, unsigned char* __restrict__ w, unsigned seed) {
  pdl_wait();
  constexpr int BE = QT == QT_Q8_0 ? 32 : 256;
  const long long nb = rows * (K / BE);
  LAGC_FOR(b, nb) {
    const unsigned long long key = ((unsigned long long)seed << 40) ^ (unsigned long long)b;
    unsigned* body;
    int words;
    if constexpr (QT == QT_Q8_0) {
      body = reinterpret_cast<unsigned*>(w + b * 32), words = 8;
      reinterpret_cast<unsigned short*>(w + align256(rows * K))[b] = qscale(qhash(key * 7 + 1));
    } else if constexpr (QT == QT_Q4_K || QT == QT_Q5_K) {
      constexpr int BYTES = QT == QT_Q4_K ? 144 : 176;
      body = reinterpret_cast<unsigned*>(w + b * BYTES + 16), words = BYTES / 4 - 4;
      unsigned* sm = reinterpret_cast<unsigned*>(w + b * BYTES);  // 6-bit scales and mins
      for (int i = 0; i < 4; i++) sm[i] = qhash(key * 7 + 4 + i) & 0x3F3F3F3Fu;
      const unsigned short d = qscale(qhash(key * 7 + 1));
      const unsigned short dmin = from_f32<half_t>((QT == QT_Q4_K ? 7.5f : 15.5f) * f16_bits(d)).bits;
      reinterpret_cast<unsigned*>(w + align256(rows * (K / 256) * BYTES))[b] = (unsigned)d | ((unsigned)dmin << 16);
    } else if constexpr (QT == QT_Q6_K) {
      body = reinterpret_cast<unsigned*>(w + b * 208), words = 52;
      reinterpret_cast<unsigned short*>(w + align256(rows * (K / 256) * 208))[b] = qscale(qhash(key * 7 + 1));
    } else {
      body = reinterpret_cast<unsigned*>(w + b * 128), words = 32;
      const unsigned h = qhash(key * 7 + 1);
      unsigned* hd = reinterpret_cast<unsigned*>(w + align256(rows * (K / 256) * 128) + b * 8);
      hd[0] = (unsigned)qscale(h) | (qhash(key * 7 + 2) & 0xFFFF0000u);
      hd[1] = qhash(key * 7 + 3);
    }
    for (int i = 0; i < words; i++) body[i] = qhash(key * 64 + 8 + i);
  }
}

// ------------------------------------- float activations (the comparison)
//
// qgemv_fx: y [T, N] = x [T, K] w^T with x bf16 or f32 as it is (no int8
// quantisation), w q8_0 or q4_k, f32 accumulation: the decode GEMV the
// quantised-activation path (q8x_quantize + qgemv on dp4a) was chosen over.
// Not planned by lower; BenchmarkQGEMVFloatX times the two side by side and
// TestQGEMVFXGPU checks it against the CPU reference. One warp per output
// row; a lane takes 32-weight units (q8_0: a group; q4_k: 16 bytes of a
// 32-byte sub-block pair, the low nibbles of sub-block 2j and the high of
// 2j+1) and converts quants with the 2^23 bit trick (no I2F).
__device__ __forceinline__ float fx_mag(unsigned v, unsigned mask) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(v), "r"(mask), "r"(0x4B000000u));
  return __int_as_float(r) - 8388608.f;
}
template <typename TX> __device__ __forceinline__ void fx_load8(const TX* p, float* o);
template <> __device__ __forceinline__ void fx_load8<float>(const float* p, float* o) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
template <> __device__ __forceinline__ void fx_load8<bf16_t>(const bf16_t* p, float* o) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    o[2 * i] = __int_as_float(w[i] << 16);
    o[2 * i + 1] = __int_as_float(w[i] & 0xFFFF0000u);
  }
}

template <typename TY, typename TX, int QT>
__global__ void __launch_bounds__(256) qgemv_fx(int T, int N, int K, long long rows, const unsigned char* __restrict__ w,
                                                const TX* __restrict__ x, TY* __restrict__ y) {
  pdl_wait();
  const int n = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (n >= N) return;
  float acc[8];
#pragma unroll
  for (int t = 0; t < 8; t++) acc[t] = 0.f;
  const int units = K / 32;
  for (int u = lane; u < units; u += 32) {
    if constexpr (QT == QT_Q8_0) {
      const uint4* q = reinterpret_cast<const uint4*>(w + (long long)n * K + 32LL * u);
      const uint4 a = __ldg(q), b = __ldg(q + 1);
      const unsigned words[8] = {a.x ^ 0x80808080u, a.y ^ 0x80808080u, a.z ^ 0x80808080u, a.w ^ 0x80808080u,
                                 b.x ^ 0x80808080u, b.y ^ 0x80808080u, b.z ^ 0x80808080u, b.w ^ 0x80808080u};
      const float d = f16_bits(__ldg(reinterpret_cast<const unsigned short*>(w + align256(rows * K)) + (long long)n * units + u));
      // Even bytes as int8, odd bytes as 256 * int8 (summed apart, scaled
      // once): two instructions a weight before its FMA.
      float wf[32];
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const unsigned v = words[i], v2 = v >> 16;
        wf[4 * i] = fx_mag(v, 0xFFu) - 128.f;
        wf[4 * i + 1] = fx_mag(v, 0xFF00u) - 32768.f;
        wf[4 * i + 2] = fx_mag(v2, 0xFFu) - 128.f;
        wf[4 * i + 3] = fx_mag(v2, 0xFF00u) - 32768.f;
      }
#pragma unroll
      for (int t = 0; t < 8; t++) {
        if (t >= T) break;
        float se = 0.f, so = 0.f;
#pragma unroll
        for (int c = 0; c < 4; c++) {
          float xv[8];
          fx_load8<TX>(x + (long long)t * K + 32LL * u + 8 * c, xv);
#pragma unroll
          for (int i = 0; i < 8; i += 2) {
            se = fmaf(wf[8 * c + i], xv[i], se);
            so = fmaf(wf[8 * c + i + 1], xv[i + 1], so);
          }
        }
        acc[t] = fmaf(d, fmaf(so, 0x1p-8f, se), acc[t]);
      }
    } else {  // q4_k: unit u = 16-byte half h of sub-block pair j of block b
      const int b = u / 8, j = (u / 2) % 4, h = u % 2;
      const long long bi = (long long)n * (K / 256) + b;
      const unsigned char* blk = w + bi * 144;
      const uint4 qv = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * j + 16 * h));
      const unsigned dd = __ldg(reinterpret_cast<const unsigned*>(w + align256(rows * (K / 256) * 144)) + bi);
      const float d = f16_bits((unsigned short)(dd & 0xFFFF)), dmin = f16_bits((unsigned short)(dd >> 16));
      const float f0 = d * (float)blk[2 * j], o0 = dmin * (float)blk[8 + 2 * j];
      const float f1 = d * (float)blk[2 * j + 1], o1 = dmin * (float)blk[8 + 2 * j + 1];
      const unsigned words[4] = {qv.x, qv.y, qv.z, qv.w};
      // The nibble at bit s read as q * 2^s: four sums by s, scaled once.
      float lo[16], hi[16];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const unsigned v = words[i], v2 = v >> 16;
        lo[4 * i] = fx_mag(v, 0xFu);
        lo[4 * i + 1] = fx_mag(v, 0xF00u);
        lo[4 * i + 2] = fx_mag(v2, 0xFu);
        lo[4 * i + 3] = fx_mag(v2, 0xF00u);
        hi[4 * i] = fx_mag(v, 0xF0u);
        hi[4 * i + 1] = fx_mag(v, 0xF000u);
        hi[4 * i + 2] = fx_mag(v2, 0xF0u);
        hi[4 * i + 3] = fx_mag(v2, 0xF000u);
      }
      const long long e0 = 256LL * b + 64 * j + 16 * h;  // first element of the low half
#pragma unroll
      for (int t = 0; t < 8; t++) {
        if (t >= T) break;
        float l0 = 0.f, l8 = 0.f, h4 = 0.f, h12 = 0.f, xl = 0.f, xh = 0.f;
#pragma unroll
        for (int c = 0; c < 2; c++) {
          float a[8], bb[8];
          fx_load8<TX>(x + (long long)t * K + e0 + 8 * c, a);
          fx_load8<TX>(x + (long long)t * K + e0 + 32 + 8 * c, bb);
#pragma unroll
          for (int i = 0; i < 8; i += 2) {
            l0 = fmaf(lo[8 * c + i], a[i], l0);
            l8 = fmaf(lo[8 * c + i + 1], a[i + 1], l8);
            h4 = fmaf(hi[8 * c + i], bb[i], h4);
            h12 = fmaf(hi[8 * c + i + 1], bb[i + 1], h12);
            xl += a[i] + a[i + 1];
            xh += bb[i] + bb[i + 1];
          }
        }
        const float sl = fmaf(l8, 0x1p-8f, l0), sh = fmaf(h12, 0x1p-12f, h4 * 0x1p-4f);
        acc[t] += f0 * sl - o0 * xl + f1 * sh - o1 * xh;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < 8; t++) {
    if (t >= T) break;
    const float v = warp_sum_q(acc[t]);
    if (lane == 0) y[(long long)t * N + n] = from_f32<TY>(v);
  }
}
