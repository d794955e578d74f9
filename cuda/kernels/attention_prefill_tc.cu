// Prefill attention on tensor cores (FlashAttention-2 style), bf16 in and
// out, float32 scores, softmax statistics and accumulators. Same semantics
// as attn_prefill in attention.cu: a chunk of ntok tokens at consecutive
// positions pos[0], pos[0]+1, ...; keys before pos[0] come from the cache
// (slot j, or j % window for a sliding layer's ring) and the chunk's own
// keys from k and v; query head h uses kv head h / (nh/nkv); a query at
// position p sees keys j <= p, and j > p - window when window > 0.
//
// A CTA of 4 warps takes FA_BQ = 64 rows of one kv head, a row being a
// (token, query head of the group) pair (row = t*group + g, as attn_prefill
// does), so each K/V tile serves the whole group. Each warp owns 16 rows:
// its Q fragments stay in registers; S = Q K^T and O += P V are mma.sync
// m16n8k16 (bf16 in, f32 accumulate); P is rounded to bf16 for the second
// product, as FlashAttention does. K and V tiles of FA_BK = 64 keys are
// double-buffered in shared memory with cp.async. The CTA walks key tiles
// from the first key any of its rows can see to the last, so tiles wholly
// outside a sliding window (or past the causal diagonal) are never loaded;
// a warp skips tiles none of its rows sees, and masks per element only in
// tiles that straddle a bound.
//
// VEC = 1 needs 16-byte aligned pointers and row strides (cp.async, 16-byte
// stores); VEC = 0 loads and stores element by element (fused QKV rows of
// odd length) with the same arithmetic.
//
// With gate != null the output is multiplied by the output gate as it is
// written (attention_gate; gate_of in gate.cu): gate rows [G] ldg elements
// apart, one per token.
//
// Shared memory (bf16, rows padded to D+8 elements: an odd number of
// 16-byte units, so ldmatrix's eight rows fall in distinct banks):
// Q [BQ][D+8], K [2][BK][D+8], V [2][BK][D+8]. exec/gpu mirrors FaCfg::SMEM.

#define FA_BQ 64
#define FA_BK 64
#define FA_THREADS 128
#define FA_NEG_INF __int_as_float(0xff800000)

template <int D> struct FaCfg {
  static constexpr int PITCH = D + 8;         // elements per shared row
  static constexpr int CH = D / 8;            // 16-byte chunks per row
  static constexpr int TILE = FA_BK * PITCH;  // elements of one K or V stage
  static constexpr int SMEM = (FA_BQ * PITCH + 4 * TILE) * 2;  // bytes
};

// 16 bytes (8 elements) global -> shared; zeros where !ok. VEC: cp.async
// (src 16-byte aligned), else plain 2-byte loads and one 16-byte store.
template <int VEC>
__device__ __forceinline__ void fa_copy16(unsigned short* dst, const unsigned short* src, bool ok) {
  if constexpr (VEC) {
    cp_async16_fill(smem_u32(dst), src, ok ? 16 : 0);
  } else {
    unsigned w[4] = {0u, 0u, 0u, 0u};
    if (ok) {
#pragma unroll
      for (int i = 0; i < 4; i++) w[i] = (unsigned)src[2 * i] | ((unsigned)src[2 * i + 1] << 16);
    }
    uint4 u;
    u.x = w[0];
    u.y = w[1];
    u.z = w[2];
    u.w = w[3];
    *reinterpret_cast<uint4*>(dst) = u;
  }
}

__device__ __forceinline__ float fa_exp2(float x) {  // 2^x; 2^-inf = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// FaRows: a CTA's share of the (token, query head of the group) rows of
// kv head blockIdx.x, both prefill attention kernels alike: bq rows
// (FA_BQ; attn_prefill_wg 64 a warpgroup) from r0, nr of them real, of R;
// p0 the first token's position. The latest rows, with the most keys, go
// to the first CTAs of the launch, every kv head's before any head's next
// (CTAs start in linear order, x fastest): with the kv head in y, the last
// heads' longest causal rows started in the last wave.
struct FaRows {
  int group, kvh, R, r0, nr, p0;
};
__device__ __forceinline__ FaRows fa_rows(int ntok, int nh, int nkv, const int* pos, int bq = FA_BQ) {
  FaRows f;
  f.group = nh / nkv;
  f.kvh = blockIdx.x;
  f.R = ntok * f.group;
  f.r0 = (gridDim.y - 1 - blockIdx.y) * bq;
  f.nr = min(bq, f.R - f.r0);
  f.p0 = pos[0];
  return f;
}

// FaKeys: the keys the rows of fr see, jlo to jhi (window > 0: the
// sliding window), in ntiles tiles of FA_BK.
struct FaKeys {
  int jlo, jhi, ntiles;
};
__device__ __forceinline__ FaKeys fa_keys(const FaRows& fr, int window) {
  const int plo = fr.p0 + fr.r0 / fr.group, phi = fr.p0 + (fr.r0 + fr.nr - 1) / fr.group;
  FaKeys k;
  k.jlo = window > 0 ? max(0, plo - window + 1) : 0;
  k.jhi = phi;
  k.ntiles = (k.jhi - k.jlo) / FA_BK + 1;
  return k;
}

// fa_load_q copies the CTA's bq Q rows (FaRows) to shared memory with its
// nthr threads, 16-byte chunk c of row r at dst(r, c); rows past nr are
// zero (their outputs are never written).
template <int D, int VEC, typename Dst>
__device__ __forceinline__ void fa_load_q(Dst dst, const unsigned short* qg, long long ldq, const FaRows& fr, int bq = FA_BQ,
                                          int nthr = FA_THREADS) {
  constexpr int CH = D / 8;
  for (int i = threadIdx.x; i < bq * CH; i += nthr) {
    const int r = i / CH, c = i - r * CH;
    const bool ok = r < fr.nr;
    const unsigned short* src = qg;
    if (ok) {
      const int row = fr.r0 + r, t = row / fr.group, h = fr.kvh * fr.group + row % fr.group;
      src = qg + t * ldq + (long long)h * D + c * 8;
    }
    fa_copy16<VEC>(dst(r, c), src, ok);
  }
}

// fa_pitched addresses a staged tile of rows pitch FaCfg<D>::PITCH apart.
template <int D>
struct fa_pitched {
  unsigned short* base;
  __device__ __forceinline__ unsigned short* operator()(int r, int c) const { return base + r * FaCfg<D>::PITCH + c * 8; }
};

// fa_store_out normalises this thread's two rows of o (o[4 db + e]:
// channel block db, row g + 8 (e / 2), channel 2 tq + e % 2) by the quad's
// sum of l, times the output gate (gate non-null), stages this warp's 16
// rows of the CTA's 64 (rows r0 .., nr of them real) where chunk(r, c)
// says (16-byte chunk c of staged row r; nothing reads it any more), and
// writes them as whole rows of out (head h of token t at t * ldo + h * D).
// VEC: 16-byte stores, else 2-byte ones. Every prefill attention ends with
// it: the pitched forms stage through fa_pitched, the ws form through its
// swizzled wa_chunk.
template <typename T, int D, int VEC, typename O, typename C>
__device__ __forceinline__ void fa_store_out(const O& o, const float (&l)[2], const C& chunk, unsigned short* og,
                                             long long ldo, const T* gate, long long ldg, int G, int nh, int group, int kvh,
                                             int r0, int nr, int warp, int lane, int g, int tq) {
  constexpr int CH = FaCfg<D>::CH, DB = D / 8;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float tot = l[r];
    tot += __shfl_xor_sync(0xffffffffu, tot, 1);
    tot += __shfl_xor_sync(0xffffffffu, tot, 2);
    const float inv = tot > 0.f ? 1.f / tot : 0.f;  // 0 only for padding rows
    const int rr = warp * 16 + g + 8 * r, row = r0 + rr;
    const T* gr = gate && rr < nr ? gate + (row / group) * ldg : nullptr;
    const int h = kvh * group + row % group;
#pragma unroll
    for (int db = 0; db < DB; db++) {
      const int c = db * 8 + 2 * tq;
      *reinterpret_cast<unsigned*>(chunk(rr, db) + 2 * tq) = pack_bf16x2(o(db, 2 * r) * inv * gate_of(gr, nh, D, G, h, c),
                                                           o(db, 2 * r + 1) * inv * gate_of(gr, nh, D, G, h, c + 1));
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * CH; i += 32) {
    const int rr = i / CH, c = i - rr * CH, r = warp * 16 + rr;
    if (r >= nr) continue;
    const int row = r0 + r, t = row / group, h = kvh * group + row % group;
    unsigned short* dst = og + t * ldo + (long long)h * D + c * 8;
    const uint4 val = *reinterpret_cast<const uint4*>(chunk(r, c));
    if constexpr (VEC) {
      *reinterpret_cast<uint4*>(dst) = val;
    } else {
      const unsigned w[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
      for (int x = 0; x < 4; x++) {
        dst[2 * x] = (unsigned short)(w[x] & 0xffffu);
        dst[2 * x + 1] = (unsigned short)(w[x] >> 16);
      }
    }
  }
}

template <typename T, int D, int VEC>
__global__ void __launch_bounds__(FA_THREADS, 2)
    attn_prefill_tc(int ntok, int nh, int nkv, int window, int slots, float scale, const int* __restrict__ pos,
                    const T* __restrict__ q, long long ldq, const T* __restrict__ k, const T* __restrict__ v,
                    long long ldkv, const T* __restrict__ kc, const T* __restrict__ vc, T* __restrict__ out,
                    long long ldo, const T* __restrict__ gate, long long ldg, int G) {
  pdl_wait();
  static_assert(sizeof(T) == 2, "attn_prefill_tc is for bf16");
  static_assert(D % 16 == 0 && D <= 256, "head_dim must be a multiple of 16");
  using Cfg = FaCfg<D>;
  constexpr int P = Cfg::PITCH, CH = Cfg::CH, NB = FA_BK / 8, DB = D / 8;
  extern __shared__ __align__(16) unsigned short fa_sm[];
  unsigned short* Qs = fa_sm;              // [BQ][P]; later the output staging
  unsigned short* Ks = Qs + FA_BQ * P;     // [2][BK][P]
  unsigned short* Vs = Ks + 2 * Cfg::TILE;  // [2][BK][P]
  const unsigned short* qg = reinterpret_cast<const unsigned short*>(q);
  const unsigned short* kg = reinterpret_cast<const unsigned short*>(k);
  const unsigned short* vg = reinterpret_cast<const unsigned short*>(v);
  const unsigned short* kcg = reinterpret_cast<const unsigned short*>(kc);
  const unsigned short* vcg = reinterpret_cast<const unsigned short*>(vc);
  unsigned short* og = reinterpret_cast<unsigned short*>(out);

  const FaRows fr = fa_rows(ntok, nh, nkv, pos);
  const int group = fr.group, kvh = fr.kvh, R = fr.R, r0 = fr.r0, nr = fr.nr, p0 = fr.p0;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long crow = (long long)nkv * D;

  fa_load_q<D, VEC>([&](int r, int c) { return Qs + r * P + c * 8; }, qg, ldq, fr);
  const FaKeys fk = fa_keys(fr, window);
  const int jlo = fk.jlo, jhi = fk.jhi, ntiles = fk.ntiles;

  // Key tile `tile` into stage st: keys past jhi (and, as a guard, ring
  // slots past the cache) are zero, so masked products stay finite.
  auto load_kv = [&](int tile, int st) {
    const int j0 = jlo + tile * FA_BK;
    unsigned short* kd = Ks + st * Cfg::TILE;
    unsigned short* vd = Vs + st * Cfg::TILE;
    for (int i = tid; i < FA_BK * CH; i += FA_THREADS) {
      const int kk = i / CH, c = i - kk * CH, j = j0 + kk;
      const unsigned short *ks = kg, *vs = vg;
      bool ok = false;
      if (j <= jhi) {
        if (j >= p0) {
          const long long off = (long long)(j - p0) * ldkv + (long long)kvh * D + c * 8;
          ks = kg + off;
          vs = vg + off;
          ok = true;
        } else {
          const int sl = window > 0 ? j % window : j;
          if (sl < slots) {  // guard only: the host keeps pos < slots
            const long long off = sl * crow + (long long)kvh * D + c * 8;
            ks = kcg + off;
            vs = vcg + off;
            ok = true;
          }
        }
      }
      fa_copy16<VEC>(kd + kk * P + c * 8, ks, ok);
      fa_copy16<VEC>(vd + kk * P + c * 8, vs, ok);
    }
  };

  load_kv(0, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // This warp's 16 rows: Q fragments (A operands, one per 16 channels).
  unsigned qf[D / 16][4];
#pragma unroll
  for (int kc2 = 0; kc2 < D / 16; kc2++) {
    const int r = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
    const int c = kc2 * 16 + (lane >> 4) * 8;
    ldsm_x4(Qs + r * P + c, qf[kc2][0], qf[kc2][1], qf[kc2][2], qf[kc2][3]);
  }

  // This thread's rows within the warp: g and g+8 (fragment layout).
  const int g = lane >> 2, tq = lane & 3;
  const int prow[2] = {p0 + (r0 + warp * 16 + g) / group, p0 + (r0 + warp * 16 + g + 8) / group};
  const int pw_lo = p0 + (r0 + warp * 16) / group, pw_hi = p0 + (r0 + warp * 16 + 15) / group;
  const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units

  float o[DB][4];
#pragma unroll
  for (int db = 0; db < DB; db++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[db][e] = 0.f;
  float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f};

  for (int it = 0; it < ntiles; it++) {
    const int st = it & 1;
    if (it + 1 < ntiles) load_kv(it + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // tile it has landed (this thread's copies) ...
    __syncthreads();  // ... and everyone's

    const int j0 = jlo + it * FA_BK;
    const bool skip = j0 > pw_hi || (window > 0 && j0 + FA_BK - 1 <= pw_lo - window);
    if (!skip) {
      const unsigned short* kt = Ks + st * Cfg::TILE;
      const unsigned short* vt = Vs + st * Cfg::TILE;
      float s[NB][4];
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[nb][e] = 0.f;
#pragma unroll
      for (int kc2 = 0; kc2 < D / 16; kc2++) {
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          const int key = nb * 8 + (lane >> 4) * 8 + (lane & 7);
          const int c = kc2 * 16 + ((lane >> 3) & 1) * 8;
          unsigned b0, b1, b2, b3;
          ldsm_x4(kt + key * P + c, b0, b1, b2, b3);
          mma_bf16(s[nb], qf[kc2], b0, b1);
          mma_bf16(s[nb + 1], qf[kc2], b2, b3);
        }
      }
      // Scale, and mask where the tile straddles a row's causal or window bound.
      const bool need = j0 + FA_BK - 1 > pw_lo || (window > 0 && j0 <= pw_hi - window);
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float x = s[nb][e] * sl2;
          if (need) {
            const int j = j0 + nb * 8 + 2 * tq + (e & 1), p = prow[e >> 1];
            if (j > p || (window > 0 && j <= p - window)) x = FA_NEG_INF;
          }
          s[nb][e] = x;
        }
      // Online softmax per row (a row's 64 scores lie in the 4 threads of a quad).
#pragma unroll
      for (int r = 0; r < 2; r++) {
        float mx = FA_NEG_INF;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m[r], mx);
        const float ms = mnew == FA_NEG_INF ? 0.f : mnew;  // nothing visible yet: all p = 0
        const float alpha = fa_exp2(m[r] - ms);             // 0 while m was -inf
        m[r] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
          s[nb][2 * r] = fa_exp2(s[nb][2 * r] - ms);
          s[nb][2 * r + 1] = fa_exp2(s[nb][2 * r + 1] - ms);
          sum += s[nb][2 * r] + s[nb][2 * r + 1];
        }
        l[r] = l[r] * alpha + sum;  // this thread's share; the quad sums at the end
#pragma unroll
        for (int db = 0; db < DB; db++) {
          o[db][2 * r] *= alpha;
          o[db][2 * r + 1] *= alpha;
        }
      }
      // O += P V: the S fragments of two adjacent key blocks form one A operand.
#pragma unroll
      for (int kc2 = 0; kc2 < FA_BK / 16; kc2++) {
        unsigned a[4];
        a[0] = pack_bf16x2(s[2 * kc2][0], s[2 * kc2][1]);
        a[1] = pack_bf16x2(s[2 * kc2][2], s[2 * kc2][3]);
        a[2] = pack_bf16x2(s[2 * kc2 + 1][0], s[2 * kc2 + 1][1]);
        a[3] = pack_bf16x2(s[2 * kc2 + 1][2], s[2 * kc2 + 1][3]);
#pragma unroll
        for (int db = 0; db < DB; db += 2) {
          const int key = kc2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
          const int c = (db + (lane >> 4)) * 8;
          unsigned b0, b1, b2, b3;
          ldsm_x4_t(vt + key * P + c, b0, b1, b2, b3);
          mma_bf16(o[db], a, b0, b1);
          mma_bf16(o[db + 1], a, b2, b3);
        }
      }
    }
    __syncthreads();  // stage st is free for the load of tile it+2
  }
  cp_async_wait<0>();

  // Stage this warp's 16 rows in its own part of Qs (only this warp read
  // those rows), then write them.
  fa_store_out<T, D, VEC>([&](int db, int e) { return o[db][e]; }, l, fa_pitched<D>{Qs}, og, ldo, gate, ldg, G, nh, group, kvh, r0, nr, warp,
                          lane, g, tq);
}
