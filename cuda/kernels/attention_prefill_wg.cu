// attn_prefill_wg: attn_prefill_tc (attention_prefill_tc.cu) on Hopper's
// warpgroup MMAs (sm_90a), for head_dim 128 and 16-byte operands: the same
// rows, key tiles, masks, online softmax and output, one warpgroup (128
// threads) for each FA_BQ = 64 rows of one kv head, NW of them a CTA
// sharing its K and V tiles (WaCfg). S = Q K^T is wgmma
// m64n64k16 with Q and the K tile read from shared memory; O += P V is
// m64n128k16 with P from registers (the S fragments packed to bf16, as
// attn_prefill_tc packs them) and the V tile read from shared memory as an
// MN-major operand (the MMA transposes it). Why: with mma.sync each warp
// reads the whole K and V tiles from shared memory for its 16 rows, which
// takes about as long as the MMAs (docs/PERF.md); a warpgroup MMA reads
// them once for 64 rows.
//
// Tiles (Q, and one or two stages of K and V, WaCfg: 64 rows x 128 bf16)
// lie in the 128-byte swizzled layout wgmma reads: two 64-column halves of
// 8 KiB, rows of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r % 8).
// cp.async writes them, each thread one column of 8 rows a tile; each
// thread's fence.proxy.async and the barrier after it hand them to the
// MMAs.
//
// Tried (not kept): tile it+1's scores and softmax beside tile it's P V
// MMAs, the loads a tile ahead. Correct, but slower on the H200 (S-2.1
// T=2048: 0.307 against 0.245 ms; two CTAs a multiprocessor already
// overlap one's softmax with the other's MMAs). Issuing both MMAs and
// waiting for the scores alone (wait_group 1) made ptxas serialise every
// wgmma (C7514).
//
// The CTA's 4 warps run every key tile of the CTA's range (a warpgroup MMA
// cannot skip a warp); a warp's rows outside a tile are masked as
// attn_prefill_tc masks them.
//
// The MN-major descriptor's strides follow the canonical 128-byte-swizzled
// MN-major layout (((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T 8 elements):
// LBO between 64-element atoms along MN (here the two 8 KiB halves), SBO
// between 8-row groups along K (1 KiB). The default on Hopper for head_dim
// 128 (LAGC_PREFILL_ATTN=tc keeps attn_prefill_tc): at S-2.1's T=2048
// shapes on the H200 0.184 / 0.207 / 0.290 ms against its 0.278 / 0.332 /
// 0.477 (TestAttentionPrefillTCTimingGPU; docs/PERF.md).

#define WA_TILE (FA_BK * 128)  // elements of a 64 x 128 tile (16 KiB)

// WaCfg<SPLIT, NW>: SPLIT 0 double-buffers K and V, loading tile it+1's
// both at the top of iteration it (80 KiB, two CTAs a multiprocessor);
// else one K and one V tile, the next K loaded as soon as the scores are
// done with this one and the next V once P V is (each load behind the
// other half of the work): 48 KiB, SPLIT + 2 CTAs a multiprocessor (4: 128
// registers, which ptxas fits without spilling). NW 2: two warpgroups a
// CTA, 64 rows each, sharing every K and V tile (half the tiles' reads
// from L2 of one warpgroup a CTA), a Q tile each; two CTAs a
// multiprocessor (128 registers a thread) with one K and one V tile
// (SPLIT 1, 64 KiB) or two of each (SPLIT 0, 96 KiB).
//
// Tried (not kept): NW 3, a warp-specialised form in FlashAttention-3's
// shape without TMA (a producer warpgroup filling rings of 2 to 4 stages,
// two consumer warpgroups on mbarriers, one persistent CTA a
// multiprocessor; LAGC_PREFILL_ATTN=ws2, ws3, ws4). The same bits as NW 2,
// but slower on the H200 in every form it took, 20-27% at the last (fused
// with the q norm: 196.5 against 154.9 us a sliding S-2.1 layer, 185.7
// against 154.9 a full one): two computing warpgroups a multiprocessor
// where NW 2 has four (docs/PERF.md). Removed.
template <int SPLIT, int NW> struct WaCfg {
  static constexpr int TILES = (NW - 1) + (SPLIT ? 3 : 5);  // Q[NW], K[1 or 2], V[1 or 2]
  static constexpr int SMEM = TILES * WA_TILE * 2 + 1024;  // 1 KiB alignment slack
  static constexpr int CTAS = NW == 2 ? 2 : SPLIT + 2;     // a multiprocessor (launch bounds)
};

// wa_chunk is where 16-byte chunk c (elements 8c..8c+7) of row r of a
// swizzled tile lies.
__device__ __forceinline__ unsigned short* wa_chunk(unsigned short* tile, int r, int c) {
  return tile + (c >> 3) * 4096 + r * 64 + (((c & 7) ^ (r & 7)) << 3);
}

// wa_desc_mn: a shared-memory descriptor of an MN-major operand in the
// 128-byte swizzle: 64-element atoms along MN 8 KiB apart (leading byte
// offset), 8-row groups along K 1 KiB apart (stride byte offset).
__device__ __forceinline__ unsigned long long wa_desc_mn(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (512ull << 16) | (64ull << 32) | (1ull << 62);
}

// wgmma m64n128k16, A (4 registers: bf16 pairs, the mma.sync A fragment of
// each warp's 16 rows) from registers, B an MN-major descriptor.
__device__ __forceinline__ void wa_mma_pv(float (&d)[64], const unsigned (&a)[4], unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// wa_q8 is 16-byte chunk c of row r of a swizzled tile as 8 floats.
__device__ __forceinline__ void wa_q8(const unsigned short* tile, int r, int c, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(wa_chunk(const_cast<unsigned short*>(tile), r, c));
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int e = 0; e < 4; e++) v[2 * e] = __uint_as_float(w[e] << 16), v[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
}
__device__ __forceinline__ void wa_st8(unsigned short* tile, int r, int c, const float (&v)[8]) {
  uint4 u;
  u.x = pack_bf16x2(v[0], v[1]), u.y = pack_bf16x2(v[2], v[3]), u.z = pack_bf16x2(v[4], v[5]), u.w = pack_bf16x2(v[6], v[7]);
  *reinterpret_cast<uint4*>(wa_chunk(tile, r, c)) = u;
}

// wa_norm_rope_q normalises (qw non-null) and rotates, in place, the 64
// head rows of a warpgroup's swizzled Q tile (head_dim 128), two threads
// a row (t128: the thread's index in its warpgroup; the pair are lanes
// t and t ^ 1), as qk_norm_rope would have before the kernel read them
// (lower.PrefillNormRoPEAttention): the sum of squares over 128 channels,
// w[c] * (x * inv), then rope_rotate's expression with the row's token's
// cosines cs and sines sn (rope_tables'), rounded to bf16. A thread takes
// a quarter of the rotated pairs, i and i + rot/2 (a quarter of rot/2: rot
// a multiple of 32), and half the channels from rot on. Its square sums
// run in another order than qk_norm_rope's, so a value may differ from
// the unfused path's by one bf16 ulp.
__device__ __forceinline__ void wa_norm_rope_q(unsigned short* tile, int t128, const float* cs, const float* sn,
                                               const float* __restrict__ qw, float eps, int rot) {
  const int rr = t128 >> 1, hf = t128 & 1, half = rot >> 1;
  const int qn = half >> 4, pn = (128 - rot) >> 4;  // chunks: rotated pairs, passed-through channels
  const int clo = hf * qn, chi = clo + (half >> 3), cpt = (rot >> 3) + hf * pn;
  float ss = 0.f, v[8], u[8];
  for (int i = 0; i < qn; i++) {
    wa_q8(tile, rr, clo + i, v);
    wa_q8(tile, rr, chi + i, u);
#pragma unroll
    for (int e = 0; e < 8; e++) ss += v[e] * v[e] + u[e] * u[e];
  }
  for (int i = 0; i < pn; i++) {
    wa_q8(tile, rr, cpt + i, v);
#pragma unroll
    for (int e = 0; e < 8; e++) ss += v[e] * v[e];
  }
  ss += __shfl_xor_sync(0xffffffffu, ss, 1);
  const float inv = 1.f / sqrtf(ss / 128.f + eps);
  for (int i = 0; i < qn; i++) {
    wa_q8(tile, rr, clo + i, v);
    wa_q8(tile, rr, chi + i, u);
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int c = 8 * (clo + i) + e;
      float a = v[e], b = u[e];
      if (qw != nullptr) a = qw[c] * (a * inv), b = qw[c + half] * (b * inv);
      v[e] = a * cs[c] - b * sn[c];
      u[e] = b * cs[c] + a * sn[c];
    }
    wa_st8(tile, rr, clo + i, v);
    wa_st8(tile, rr, chi + i, u);
  }
  if (qw == nullptr) return;
  for (int i = 0; i < pn; i++) {
    wa_q8(tile, rr, cpt + i, v);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = qw[8 * (cpt + i) + e] * (v[e] * inv);
    wa_st8(tile, rr, cpt + i, v);
  }
}

// wa_nr_tokens is the most tokens a CTA's rows span (rows run token-major,
// group heads a token): its rope table's, after the tiles (rot floats a
// token; lower.PrefillNormRoPEAttention sizes it alike).
__device__ __forceinline__ int wa_nr_tokens(int rows, int group) { return (rows - 1) / group + 2; }

// wa_rope_table is rope_tables of ntab tokens from position p (one call a
// CTA, out of line as measured; inlined, ptxas reports the same spill).
__device__ __noinline__ void wa_rope_table(float* tab, int ntab, int p, int rot, const float* __restrict__ inv_freq, float attn) {
  rope_tables(tab, ntab, p, rot, nullptr, inv_freq, attn);
}

// wa_scores: s = Q K^T of a warpgroup's 64 rows and a 64-key tile (both
// swizzled tiles at qa, ka), waited for.
// The k16 steps' descriptors are the tiles' plus the step's offset in 16
// bytes (shared addresses stay below 2^18, so the 14-bit field never
// carries): one add a descriptor, not wg_desc's mask, shift and or.
// The first step writes s without reading it (scale-d 0, outputs only):
// no zeroing of s a tile.
__device__ __forceinline__ void wa_scores(float (&s)[32], unsigned qa, unsigned ka) {
  wg_fence();
  const unsigned long long dq = wg_desc(qa), dk = wg_desc(ka);
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 0, 1, 1, 0, 0;\n"
      : "=f"(s[0]), "=f"(s[1]), "=f"(s[2]), "=f"(s[3]), "=f"(s[4]), "=f"(s[5]), "=f"(s[6]), "=f"(s[7]), "=f"(s[8]), "=f"(s[9]), "=f"(s[10]), "=f"(s[11]), "=f"(s[12]), "=f"(s[13]), "=f"(s[14]), "=f"(s[15]), "=f"(s[16]), "=f"(s[17]), "=f"(s[18]), "=f"(s[19]), "=f"(s[20]), "=f"(s[21]), "=f"(s[22]), "=f"(s[23]), "=f"(s[24]), "=f"(s[25]), "=f"(s[26]), "=f"(s[27]), "=f"(s[28]), "=f"(s[29]), "=f"(s[30]), "=f"(s[31])
      : "l"(dq), "l"(dk));
#pragma unroll
  for (int kk = 1; kk < 8; kk++) {
    const unsigned off = ((kk >> 2) * 8192 + (kk & 3) * 32) >> 4;
    wgmma_m64n64(s, dq + off, dk + off, 1);
  }
  wg_commit();
  wg_wait<0>();
  wg_pin(s);
}

// wa_softmax takes the tile's scores s (keys from j0; times sl2 they are
// in log2 units), masks them where the tile straddles a row's causal or
// window bound (the warp's rows at positions pw_lo .. pw_hi, this
// thread's at prow), runs the online softmax of each row (a row's 64
// scores lie in the 4 threads of a quad: max m, this thread's share of
// the sum l, o rescaled) and packs P as the A operands of P V (the S
// fragments of two adjacent key blocks form one).
// WA_LAZY: how far (log2 units) a row's scores may exceed its reference
// maximum before wa_softmax moves it (FlashAttention-4 uses 8).
#define WA_LAZY 8.f

__device__ __forceinline__ void wa_softmax(float (&s)[32], float (&o)[64], float (&m)[2], float (&l)[2], unsigned (&a)[4][4], int j0,
                                           int pw_lo, int pw_hi, const int (&prow)[2], int tq, int window, float sl2) {
  constexpr int NB = FA_BK / 8, DB = 16;
  const bool need = j0 + FA_BK - 1 > pw_lo || (window > 0 && j0 <= pw_hi - window);
  if (need) {
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int j = j0 + nb * 8 + 2 * tq + (e & 1), p = prow[e >> 1];
        if (j > p || (window > 0 && j <= p - window)) s[4 * nb + e] = FA_NEG_INF;
      }
  }
  // The row's maximum of the raw scores, then scaled (sl2 > 0: the same
  // float as the maximum of the scaled scores); each p is exp2 of one
  // FFMA, s sl2 - m. m is a reference, not always the maximum so far
  // (FlashAttention-4's lazy rescaling): it moves only when some row of
  // the warp sees scores above it by more than WA_LAZY (log2 units), so
  // most tiles skip o's rescale (64 multiplies a thread, a quarter of the
  // softmax's instructions); p then stays under 2^WA_LAZY, which f32 sums
  // and bf16 P hold. l and o share the reference, so o / l is unchanged
  // but for rounding. The vote is a warp's: its 16 rows decide together
  // and the branch stays uniform.
  float mxs[2];
  bool up = false;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float mx = FA_NEG_INF;
#pragma unroll
    for (int nb = 0; nb < NB; nb++) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * r], s[4 * nb + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mxs[r] = mx * sl2;
    up |= mxs[r] > m[r] + WA_LAZY;  // m -inf: any visible score
  }
  up = __any_sync(0xffffffffu, up);
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float alpha = 1.f;
    if (up) {
      const float mnew = fmaxf(m[r], mxs[r]);
      alpha = fa_exp2(m[r] - (mnew == FA_NEG_INF ? 0.f : mnew));  // 0 while m was -inf
      m[r] = mnew;
    }
    const float ms = m[r] == FA_NEG_INF ? 0.f : m[r];  // nothing visible yet: all p = 0
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
      s[4 * nb + 2 * r] = fa_exp2(fmaf(s[4 * nb + 2 * r], sl2, -ms));
      s[4 * nb + 2 * r + 1] = fa_exp2(fmaf(s[4 * nb + 2 * r + 1], sl2, -ms));
      sum += s[4 * nb + 2 * r] + s[4 * nb + 2 * r + 1];
    }
    l[r] = up ? l[r] * alpha + sum : l[r] + sum;  // this thread's share; the quad sums at the end
    if (up) {
#pragma unroll
      for (int db = 0; db < DB; db++) {
        o[4 * db + 2 * r] *= alpha;
        o[4 * db + 2 * r + 1] *= alpha;
      }
    }
  }
#pragma unroll
  for (int kc2 = 0; kc2 < FA_BK / 16; kc2++) {
    a[kc2][0] = pack_bf16x2(s[8 * kc2 + 0], s[8 * kc2 + 1]);
    a[kc2][1] = pack_bf16x2(s[8 * kc2 + 2], s[8 * kc2 + 3]);
    a[kc2][2] = pack_bf16x2(s[8 * kc2 + 4], s[8 * kc2 + 5]);
    a[kc2][3] = pack_bf16x2(s[8 * kc2 + 6], s[8 * kc2 + 7]);
  }
}

// wa_pv: o += P V (the V tile at va), waited for; each k16 step's
// descriptor the tile's plus a constant.
__device__ __forceinline__ void wa_pv(float (&o)[64], const unsigned (&a)[4][4], unsigned va) {
  wg_pin(o);
  wg_fence();
  const unsigned long long dv = wa_desc_mn(va);
#pragma unroll
  for (int kc2 = 0; kc2 < FA_BK / 16; kc2++) wa_mma_pv(o, a[kc2], dv + kc2 * (2048 >> 4));
  wg_commit();
  wg_wait<0>();
  wg_pin(o);
}

// KRows: the 8 NW rows kr + 8 NW n (n < KR = 8 / NW)
// of key tile `tile` a thread copies chunk kch of: their element offsets
// from the chunk's k/v (bit n of cache clear) or the cache base (set),
// found once a tile for both K and V with one modulo (the ring slot of
// the first row): the per-copy index arithmetic had made the kernel
// issue-bound (the same kernel with K and V found separately took 0.308
// against 0.245 ms).
template <int KR> struct KRows {
  unsigned off[KR];
  unsigned cache, ok;
};
template <int NW>
__device__ __forceinline__ KRows<8 / NW> wa_krows(int tile, int jlo, int jhi, int p0, int kr, int window, int slots, long long ldkv,
                                                long long crow) {
  constexpr int KR = 8 / NW;
  KRows<KR> r;
  r.cache = 0, r.ok = 0;
  const int jb = jlo + tile * FA_BK + kr;
  if (jlo + tile * FA_BK >= p0) {  // the whole tile from the chunk: no ring slot, no branch a row
#pragma unroll
    for (int n = 0; n < KR; n++) {
      const int j = jb + 8 * NW * n;
      r.off[n] = (unsigned)((long long)(j - p0) * ldkv);
      r.ok |= (unsigned)(j <= jhi) << n;
    }
    return r;
  }
  int sl = window > 0 ? jb % window : jb;  // ring slot of row jb (cache rows only)
#pragma unroll
  for (int n = 0; n < KR; n++) {
    const int j = jb + 8 * NW * n;
    r.off[n] = 0;
    if (j <= jhi) {
      if (j >= p0) {
        r.off[n] = (unsigned)((long long)(j - p0) * ldkv);
        r.ok |= 1u << n;
      } else if (sl < slots) {  // guard only: the host keeps pos < slots
        r.off[n] = (unsigned)((long long)sl * crow);
        r.cache |= 1u << n, r.ok |= 1u << n;
      }
    }
    sl += 8 * NW;
    if (window > 0 && sl >= window) sl = window >= 8 * NW ? sl - window : sl % window;
  }
  return r;
}
// wa_kload copies rows r of a tile of K or V (cur: the chunk's, cache: the
// cache's, both at the thread's chunk) to dst (the thread's first chunk in
// the tile), rows 8 NW apart.
template <int NW, int KR>
__device__ __forceinline__ void wa_kload(unsigned short* dst, const unsigned short* cur, const unsigned short* cache, const KRows<KR>& r) {
#pragma unroll
  for (int n = 0; n < KR; n++) fa_copy16<1>(dst + n * 512 * NW, ((r.cache >> n) & 1 ? cache : cur) + r.off[n], (r.ok >> n) & 1);
}

// NR 1: q holds the heads before their per-head norm and rotation (qw,
// eps, inv_freq, rot, attnf as qk_norm_rope takes them), which the kernel
// does on its Q tiles (wa_norm_rope_q); NR 0 ignores those arguments. The
// NR variant's ptxas spills p0 (reloaded where the K rows are found);
// reading pos[0] again there instead removed the loop's reloads but was
// slower (BenchmarkPrefillNormRoPEAttention, docs/PERF.md).
template <int D, int SPLIT, int NW, int NR>
__global__ void __launch_bounds__(128 * NW, WaCfg<SPLIT, NW>::CTAS)
    attn_prefill_wg(int ntok, int nh, int nkv, int window, int slots, float scale, const int* __restrict__ pos,
                    const bf16_t* __restrict__ q, long long ldq, const bf16_t* __restrict__ k, const bf16_t* __restrict__ v,
                    long long ldkv, const bf16_t* __restrict__ kc, const bf16_t* __restrict__ vc, bf16_t* __restrict__ out,
                    long long ldo, const bf16_t* __restrict__ gate, long long ldg, int G, const float* __restrict__ qw, float eps,
                    const float* __restrict__ inv_freq, int rot, float attnf) {
  pdl_wait();
  static_assert(D == 128, "attn_prefill_wg is for head_dim 128");
  static_assert(NW == 1 || (NW == 2 && SPLIT <= 1), "two warpgroups a CTA: one K and one V tile, or two of each");
  constexpr int NB = FA_BK / 8, DB = D / 8;
  constexpr int KR = 8 / NW;  // key rows a thread copies a tile (16 threads a row)
  extern __shared__ __align__(16) unsigned char wa_raw[];
  unsigned short* Qs = reinterpret_cast<unsigned short*>(((unsigned long long)wa_raw + 1023) & ~1023ull);
  constexpr int NS = SPLIT ? 1 : 2;        // K and V stages
  unsigned short* Ks = Qs + NW * WA_TILE;  // [NS] swizzled tiles
  unsigned short* Vs = Ks + NS * WA_TILE;  // [NS]
  const unsigned short* qg = reinterpret_cast<const unsigned short*>(q);
  const unsigned short* kg = reinterpret_cast<const unsigned short*>(k);
  const unsigned short* vg = reinterpret_cast<const unsigned short*>(v);
  const unsigned short* kcg = reinterpret_cast<const unsigned short*>(kc);
  const unsigned short* vcg = reinterpret_cast<const unsigned short*>(vc);
  unsigned short* og = reinterpret_cast<unsigned short*>(out);

  // The CTA's rows, in blocks of 64 NW; warpgroup wg's are r0 .. r0 + 63
  // from the CTA's first (nr of them real).
  const FaRows fr = fa_rows(ntok, nh, nkv, pos, FA_BQ * NW);
  // wg broadcast from lane 0: ptxas then knows it is the warp's, keeps the
  // Q tile's descriptors in uniform registers and adds each k16 step's
  // offset there (from tid directly: two moves into uniform registers for
  // each of a tile's 8 QK^T MMAs, 34 instructions a tile).
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lane = tid & 31, warp = (tid >> 5) & 3;
  const int group = fr.group, kvh = fr.kvh, R = fr.R, r0 = fr.r0 + wg * FA_BQ, nr = max(0, min(FA_BQ, R - r0)), p0 = fr.p0;
  const long long crow = (long long)nkv * D;

  fa_load_q<D, 1>([&](int r, int c) { return wa_chunk(Qs + (r / FA_BQ) * WA_TILE, r % FA_BQ, c); }, qg, ldq, fr, FA_BQ * NW,
                  128 * NW);
  if constexpr (NR) cp_async_commit();  // Q alone: rotated before the first scores read it
  const FaKeys fk = fa_keys(fr, window);  // the keys of the CTA's rows: both warpgroups walk them
  const int jlo = fk.jlo, jhi = fk.jhi, ntiles = fk.ntiles;

  // A thread copies chunk kch = tid % 16 of key rows kr + 8 NW n (kr = tid /
  // 16, n < KR) of each tile: the same swizzled column for all (their row %
  // 8 is kr's), found by wa_krows (a finder written out here instead
  // spilled less, 4 against 16 bytes, but issued 97 more instructions a
  // tile and measured 0.5-3% slower, docs/PERF.md).
  const int kr = tid >> 4, kch = tid & 15;
  const long long kbase = (long long)kvh * D + kch * 8;
  const unsigned kdst = (kch >> 3) * 4096 + kr * 64 + (((kch & 7) ^ (kr & 7)) << 3);
  auto rows = [&](int tile) { return wa_krows<NW>(tile, jlo, jhi, p0, kr, window, slots, ldkv, crow); };
  // load copies tile rows r of K (kv 0) or V (kv 1) into stage st.
  auto load = [&](int kv, const KRows<KR>& r, int st) {
    wa_kload<NW>((kv ? Vs : Ks) + st * WA_TILE + kdst, (kv ? vg : kg) + kbase, (kv ? vcg : kcg) + kbase, r);
  };

  KRows<KR> kr0 = rows(0);
  load(0, kr0, 0);
  if constexpr (SPLIT) cp_async_commit();  // Q and K of tile 0, then its V
  load(1, kr0, 0);
  cp_async_commit();
  if constexpr (NR) {
    // The cosines and sines of the CTA's tokens (a sincosf a pair and
    // token, not a pair and row: group rows a token), while Q comes.
    float* tab = reinterpret_cast<float*>(Qs + WaCfg<SPLIT, NW>::TILES * WA_TILE);
    const int t0 = fr.r0 / group;
    wa_rope_table(tab, wa_nr_tokens(FA_BQ * NW, group), p0 + t0, rot, inv_freq, attnf);
    cp_async_wait<SPLIT ? 2 : 1>();  // Q (this thread's copies; K and V may still come) ...
    __syncthreads();           // ... and everyone's, and the table; the loop's first fence and barrier hand the result to the MMAs
    const float* cs = tab + ((r0 + ((tid & 127) >> 1)) / group - t0) * rot;
    wa_norm_rope_q(Qs + wg * WA_TILE, tid & 127, cs, cs + (rot >> 1), qw, eps, rot);
  }

  const int g = lane >> 2, tq = lane & 3;
  const int prow[2] = {p0 + (r0 + warp * 16 + g) / group, p0 + (r0 + warp * 16 + g + 8) / group};
  const int pw_lo = p0 + (r0 + warp * 16) / group, pw_hi = p0 + (r0 + warp * 16 + 15) / group;
  const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units
  const unsigned qa = smem_u32(Qs + wg * WA_TILE);

  float o[4 * DB];  // o[4 db + e]: attn_prefill_tc's o[db][e]
#pragma unroll
  for (int i = 0; i < 4 * DB; i++) o[i] = 0.f;
  float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f};

  for (int it = 0; it < ntiles; it++) {
    const int st = SPLIT ? 0 : it & 1;
    if constexpr (!SPLIT) {
      if (it + 1 < ntiles) {
        const KRows<KR> r = rows(it + 1);
        load(0, r, st ^ 1);
        load(1, r, st ^ 1);
      }
      cp_async_commit();
    }
    cp_async_wait<1>();  // K of tile it (SPLIT: its V may still come; else V too), this thread's copies ...
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();  // ... and everyone's, visible to the MMAs

    const int j0 = jlo + it * FA_BK;
    const unsigned ka = smem_u32(Ks + st * WA_TILE), va = smem_u32(Vs + st * WA_TILE);
    float s[4 * NB];  // s[4 nb + e]: attn_prefill_tc's s[nb][e]
    wa_scores(s, qa, ka);
    if constexpr (SPLIT) {
      __syncthreads();  // every warp's scores are done with K: the next one comes
      if (it + 1 < ntiles) {
        kr0 = rows(it + 1);  // kept for its V
        load(0, kr0, 0);
      }
      cp_async_commit();
    }

    unsigned a[FA_BK / 16][4];
    wa_softmax(s, o, m, l, a, j0, pw_lo, pw_hi, prow, tq, window, sl2);
    if constexpr (SPLIT) {
      cp_async_wait<1>();  // V of tile it (the next K may still come) ...
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();  // ... everyone's
    }
    wa_pv(o, a, va);
    __syncthreads();  // SPLIT: V is free for the next; else stage st for tile it+2
    if constexpr (SPLIT) {
      if (it + 1 < ntiles) load(1, kr0, 0);
      cp_async_commit();
    }
  }
  cp_async_wait<0>();

  // Stage this warp's 16 rows in the K (and V) tiles, NW 2 from the first
  // Q tile on, 64 rows of D + 8 a warpgroup (no MMA reads them any more:
  // the last tile ended with a barrier after every P V), then write them.
  fa_store_out<bf16_t, D, 1>([&](int db, int e) { return o[4 * db + e]; }, l,
                             fa_pitched<D>{NW == 1 ? Ks : Qs + wg * FA_BQ * FaCfg<D>::PITCH}, og,
                             ldo, gate, ldg, G, nh, group, kvh, r0, nr, warp, lane, g, tq);
}
