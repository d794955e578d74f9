// Causal grouped-query attention over the KV cache (layout in kvcache.cu:
// K and V [slots, nkv, d], position p in slot p, or p % window for a ring).
// Query head h uses kv head h / (nh/nkv). Scores q.k*scale and the softmax
// are float32 (online softmax, flash style). A sliding layer's query at
// position p sees keys j with p-window < j <= p; a full layer's, j <= p.

#define ATT_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float att_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float att_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ int att_slot(int j, int window) { return window > 0 ? j % window : j; }

// ---------------------------------------------------------------------------
// Decode (one token). The position is read from device memory, so the
// number of valid keys is too; the grid is fixed (nsplit, nkv, head blocks)
// so one captured graph serves every step. The visible keys are split
// evenly over nsplit blocks per kv head (flash-decoding); a block takes up
// to DEC_HEADS query heads of its kv head (all of the group when it fits),
// a warp per head, so each key is read once per block. With nsplit == 1
// the block writes the output directly. Otherwise each block writes its
// unnormalised partial (acc, max, sum) to the workspace and counts itself
// done on its group's counter (one per row, kv head and head block, in
// `counters`); the last block of the group to finish merges the group's
// partials and writes the output, and sets the counter back to 0, so the
// counters are zero between launches (they start zeroed) and a captured
// graph replays. The merge reads every partial from memory in split order
// (its own too), so the result's bits do not depend on which block came
// last.
//
// Output gate (attention_gate): with gate != null the output is multiplied
// by softplus of the gate as it is written (gate_of in gate.cu): gate rows
// [G] ldg elements apart, one per token, G == nh per head, nh*d per element.
//
// Batched decode (continuous batching): grid z holds rows x head blocks;
// row r is token r of the step, at position pos[r], in sequence slot
// seq[r], whose caches lie seq[r]*seq_stride elements after kc, vc (slot
// -1 pads a batch-size bucket: it writes zeros). Each row is computed
// exactly as alone: the split count depends on the cache only.
//
// This step's k and v: with kx != null (vx too) they are rows [nkv, d] of
// this token, read from there for key pos and written into the cache by
// the one block per kv head whose keys include pos (no other block reads
// that slot: a ring's slot pos held key pos-window, which is not visible),
// which saves the separate kv_append launch. With kx null the cache
// already holds them (KVAppend ran before).
//
// The key loop, one of three by the cache's size (lower's DecodeMMA and
// DecodeStages): on tensor cores (TC, dec_keys_mma, below), or the FFMA
// loop with its tiles through a cp.async ring of ST stages, or the FFMA
// loop as described here. Per tile of DEC_TILE keys: K and V are loaded
// with 16-byte loads (several in flight per thread) into shared memory
// (as the cache's T, K rows padded by dec_tpitch so that the lanes' rows
// fall in distinct banks); a warp scores its head against the tile with a
// key per lane, keeps the online softmax's max and sum in registers, and
// accumulates p.V with 4 channels per lane (NCH chunks of 128 channels)
// (dec_tile). The previous kernel (128 threads, two-byte loads, scores and
// softmax through shared memory and three barriers per tile) was latency
// bound.
//
// Dynamic shared memory (d4 = d rounded up to 4, kp = dec_tpitch): q
// [heads][d4] floats, then K [DEC_TILE][kp] and V [DEC_TILE][d4] of T (lower
// sizes one tile as floats), ST of them with a ring; with TC each warp's
// two stages of DEC_MMA_STAGE bf16 instead; kT after them.

#define DEC_TILE 32
#define DEC_HEADS 16
#define DEC_LD 4

// DecVec<T>::N: how many T fill a 16-byte load.
template <typename T> struct DecVec {
  static constexpr int N = 16 / sizeof(T);
};
// dec_bf16x2, dec_f16x2: a word's two 2-byte values as floats, the one at
// the lower address first.
__device__ __forceinline__ void dec_bf16x2(unsigned int u, float* o) {
  o[0] = __uint_as_float(u << 16);
  o[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ void dec_f16x2(unsigned int u, float* o) {
  half_t a, b;
  a.bits = (unsigned short)(u & 0xffffu);
  b.bits = (unsigned short)(u >> 16);
  o[0] = to_f32(a);
  o[1] = to_f32(b);
}

// dec_pitch is the K tile's row pitch: d4 floats padded to 4 mod 32.
__device__ __forceinline__ int dec_pitch(int d4) { return d4 + ((36 - (d4 & 31)) & 31); }

// The K and V tiles hold the cache's own T (bf16 and f16 as they are, half
// the shared memory a float took): a tile's 32 keys are read by every head's
// warp, and at long contexts, where a block walks many tiles, the shared
// loads of float tiles bounded the kernel. Converted to float as they are
// read (exactly): the same values, the same bits.
//
// dec_tpitch is the K tile's row pitch in T: floats d4 padded to 4 mod 32
// (dec_pitch); 2-byte T d4 padded so that a row is 2 words mod 32, which puts
// a lane's 8-byte read of its row in banks of its own.
template <typename T> __device__ __forceinline__ int dec_tpitch(int d4) {
  if constexpr (sizeof(T) == 4) return dec_pitch(d4);
  return d4 + ((68 - (d4 & 63)) & 63);
}
// dec_x2: dec_bf16x2 or dec_f16x2 by the tile's type (p's).
__device__ __forceinline__ void dec_x2(const bf16_t*, unsigned int u, float* o) { dec_bf16x2(u, o); }
__device__ __forceinline__ void dec_x2(const half_t*, unsigned int u, float* o) { dec_f16x2(u, o); }
// dec_ld4 reads 4 tile values (8-byte aligned for 2-byte T) as floats.
template <typename T> __device__ __forceinline__ float4 dec_ld4(const T* p) {
  if constexpr (sizeof(T) == 4) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    float f[4];
    dec_x2(p, u.x, f);
    dec_x2(p, u.y, f + 2);
    return make_float4(f[0], f[1], f[2], f[3]);
  }
}
// dec_stv stores one 16-byte load of T (DecVec<T>::N values) into a tile
// row at p (8-byte aligned for 2-byte T, 16 for float).
template <typename T> __device__ __forceinline__ void dec_stv(T* p, uint4 u) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<uint4*>(p) = u;
  } else {
    reinterpret_cast<uint2*>(p)[0] = make_uint2(u.x, u.y);
    reinterpret_cast<uint2*>(p)[1] = make_uint2(u.z, u.w);
  }
}

// dec_q8x writes this warp's head h of the output quantised to int8 groups
// of 32 channels, bit for bit as q8x_quantize quantises the stored output
// (quant.cu: q8x_group): v[i][e] is channel 4*(lane+32i)+e as stored, a
// group is 8 lanes' 4 channels, its amax and half sums are exact however
// they are reduced. xq and xs are the row's int8 values and group scales
// (d, d*sum of the low 16, d*sum of the high 16, 0); d % 32 == 0 (lower
// fuses only then). Every lane of the warp calls it (shuffles).
template <int NCH>
__device__ __forceinline__ void dec_q8x(const float (&v)[NCH][4], int lane, int d, int h, signed char* xq, float4* xs) {
#pragma unroll
  for (int i = 0; i < NCH; i++) {
    const int c = 4 * (lane + 32 * i);
    float amax = fmaxf(fmaxf(fabsf(v[i][0]), fabsf(v[i][1])), fmaxf(fabsf(v[i][2]), fabsf(v[i][3])));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dq = amax / 127.f;
    int q[4], sum = 0;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      q[e] = amax > 0.f ? __float2int_rn(v[i][e] / dq) : 0;
      sum += q[e];
    }
#pragma unroll
    for (int o = 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // 4 lanes: 16 channels
    const int hi = __shfl_down_sync(0xffffffffu, sum, 4);
    if (c < d) {
      const long long at = (long long)h * d + c;
      *reinterpret_cast<unsigned*>(xq + at) = (unsigned)(q[0] & 0xff) | (unsigned)(q[1] & 0xff) << 8 |
                                              (unsigned)(q[2] & 0xff) << 16 | (unsigned)(q[3] & 0xff) << 24;
      if ((lane & 7) == 0) xs[at / 32] = make_float4(dq, dq * (float)sum, dq * (float)hi, 0.f);
    }
  }
}

// dec_gate is this lane's channels' gate factors (channel 4*(lane+32i)+e
// of head h; gr: the token's gate row, or null: 1), read before the split
// merge so that the merging block does not wait for them.
template <typename T, int NCH>
__device__ __forceinline__ void dec_gate(float (&gf)[NCH][4], int lane, int d, int nh, int h, const T* gr, int G) {
#pragma unroll
  for (int i = 0; i < NCH; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int c = 4 * (lane + 32 * i) + e;
      gf[i][e] = c < d ? gate_of(gr, nh, d, G, h, c) : 1.f;
    }
}

// dec_write stores this warp's head of the output, o[i][e] being channel
// 4*(lane+32i)+e, times its gate factor (dec_gate), and with xq its
// quantised copy (dec_q8x).
template <typename T, int NCH>
__device__ __forceinline__ void dec_write(T* out, const float (&o)[NCH][4], int lane, int d, int h,
                                          const float (&gf)[NCH][4], signed char* xq, float4* xs) {
  float v[NCH][4];
#pragma unroll
  for (int i = 0; i < NCH; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int c = 4 * (lane + 32 * i) + e;
      v[i][e] = 0.f;
      if (c < d) {
        const T st = from_f32<T>(o[i][e] * gf[i][e]);
        out[(long long)h * d + c] = st;
        v[i][e] = to_f32(st);
      }
    }
  if (xq) dec_q8x<NCH>(v, lane, d, h, xq, xs);
}

// dec_merge merges the nsplit partials of query head h (part_acc [nsplit][nh][d],
// part_ml [nsplit][nh][2], this row's) in split order, as one warp: the
// splits' maxima and sums give weights exp(m_s - M) (0 for an empty split)
// and the denominator, held by the lanes a split each and broadcast by
// shuffles; o gets this lane's channels of sum_s w_s acc_s / den. Loads
// bypass L1 (other blocks wrote the partials during this launch); VEC4
// (d a multiple of 4) reads 4 channels at once.
//
// It runs in the last block of a group after every other block, so its
// memory round trips are the attention's tail (Nsight: the busiest SM
// active twice as long as the average). Up to DEC_MERGE_REG splits a lane
// loads its splits' (max, sum) once, both at once, and keeps them for the
// maximum, the denominator and the weights (one round trip where reading
// them in each phase, the sum before the max, took six), and 8 splits'
// partials are loaded before they are summed. The same expressions in the
// same order either way: the same bits.
#define DEC_MERGE_REG 64
template <int NCH, bool VEC4>
__device__ __forceinline__ void dec_merge(float (&o)[NCH][4], const float* part_acc, const float* part_ml, int nsplit,
                                          int nh, int d, int h, int lane) {
  constexpr int B = DEC_MERGE_REG / 32;
  long long mstride = (long long)nh * 2, astride = (long long)nh * d;
  const float* ml = part_ml + (long long)h * 2;
  const float* pa = part_acc + (long long)h * d;
  float num[NCH][4];
#pragma unroll
  for (int i = 0; i < NCH; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) num[i][e] = 0.f;
  // num += the partials of splits s0 .. s0+31, split s0+j weighted by lane
  // j's wl.
  auto add_splits = [&](int s0, float wl) {
    int ns = min(32, nsplit - s0);
#pragma unroll 8
    for (int j = 0; j < ns; j++) {
      float w = __shfl_sync(0xffffffffu, wl, j);
      const float* ps = pa + (s0 + j) * astride;
#pragma unroll
      for (int i = 0; i < NCH; i++) {
        int c = 4 * (lane + 32 * i);
        if (VEC4) {
          if (c < d) {
            float4 a = __ldcg(reinterpret_cast<const float4*>(ps + c));
            num[i][0] += w * a.x;
            num[i][1] += w * a.y;
            num[i][2] += w * a.z;
            num[i][3] += w * a.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; e++)
            if (c + e < d) num[i][e] += w * __ldcg(ps + c + e);
        }
      }
    }
  };
  float M = ATT_NEG_INF, den = 0.f;
  if (nsplit <= DEC_MERGE_REG) {  // uniform
    float ms[B], ls[B];             // split lane + 32b's max and sum
#pragma unroll
    for (int b = 0; b < B; b++) {
      const int s = lane + 32 * b;
      ms[b] = s < nsplit ? __ldcg(ml + s * mstride) : 0.f;
      ls[b] = s < nsplit ? __ldcg(ml + s * mstride + 1) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < B; b++)
      if (lane + 32 * b < nsplit && ls[b] > 0.f) M = fmaxf(M, ms[b]);
    M = att_warp_max(M);
#pragma unroll
    for (int b = 0; b < B; b++)
      if (lane + 32 * b < nsplit) den += ls[b] > 0.f ? expf(ms[b] - M) * ls[b] : 0.f;
    den = att_warp_sum(den);
#pragma unroll
    for (int b = 0; b < B; b++)
      if (32 * b < nsplit) add_splits(32 * b, lane + 32 * b < nsplit && ls[b] > 0.f ? expf(ms[b] - M) : 0.f);
  } else {
    for (int s = lane; s < nsplit; s += 32)
      if (__ldcg(ml + s * mstride + 1) > 0.f) M = fmaxf(M, __ldcg(ml + s * mstride));
    M = att_warp_max(M);
    for (int s = lane; s < nsplit; s += 32) {
      float l = __ldcg(ml + s * mstride + 1);
      den += l > 0.f ? expf(__ldcg(ml + s * mstride) - M) * l : 0.f;
    }
    den = att_warp_sum(den);
    for (int s0 = 0; s0 < nsplit; s0 += 32) {
      float wl = 0.f;
      if (s0 + lane < nsplit) {
        float l = __ldcg(ml + (s0 + lane) * mstride + 1);
        wl = l > 0.f ? expf(__ldcg(ml + (s0 + lane) * mstride) - M) : 0.f;
      }
      add_splits(s0, wl);
    }
  }
#pragma unroll
  for (int i = 0; i < NCH; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[i][e] = num[i][e] / den;
}

// dec_rope_stage is rope_stage of one head with 4 channels a lane where
// v4 (qk_norm_rope's vector path), else 1.
template <typename T>
__device__ __forceinline__ void dec_rope_stage(bool v4, int d, const T* x, float* b, const float* __restrict__ w, float eps) {
  if (v4)
    rope_stage<4, T>(d, x, b, w, eps);
  else
    rope_stage<1, T>(d, x, b, w, eps);
}

// dec_tile folds a tile of nt keys (K rows kp apart, V rows d4 apart) into
// this warp's head (q at qr): its scores, the online softmax's max m and
// sum l, and acc. Every lane of the warp calls it.
template <typename T, int NCH>
__device__ __forceinline__ void dec_tile(const T* Ks, const T* Vs, int kp, int d4, const float* qr, int nt, int lane,
                                         float scale, float& m, float& l, float (&acc)[NCH][4]) {
  // Scores: key `lane` against this warp's head.
  float sc = ATT_NEG_INF;
  if (lane < nt) {
    const T* kr = Ks + lane * kp;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll 4
    for (int c = 0; c < d4; c += 4) {
      float4 kv = dec_ld4(kr + c);
      float4 qv = *reinterpret_cast<const float4*>(qr + c);
      a0 += qv.x * kv.x;
      a1 += qv.y * kv.y;
      a2 += qv.z * kv.z;
      a3 += qv.w * kv.w;
    }
    sc = ((a0 + a1) + (a2 + a3)) * scale;
  }
  // Online softmax, in registers (every lane holds m and l).
  float mnew = fmaxf(m, att_warp_max(sc));
  float pr = lane < nt ? expf(sc - mnew) : 0.f;
  float alpha = expf(m - mnew);  // 0 on the first tile (m = -inf)
  l = l * alpha + att_warp_sum(pr);
  m = mnew;
#pragma unroll
  for (int i = 0; i < NCH; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[i][e] *= alpha;
  // acc += p.V: channels 4ch..4ch+3 for ch = lane + 32i. A lane's chunks
  // are fixed, so their offsets (clamped into the row) and bounds are
  // worked out before the key loop, which is then a shuffle, a shared
  // load and four FMAs a key and chunk: guarded loads inside it made the
  // compiler recompute the shared window's address and reconverge around
  // every load (Nsight: 38% of the kernel's instructions). A chunk past
  // d4 adds 0 * v to channels never written.
  int voff[NCH];
  bool vin[NCH];
#pragma unroll
  for (int i = 0; i < NCH; i++) {
    const int c = 4 * (lane + 32 * i);
    vin[i] = c < d4;
    voff[i] = vin[i] ? c : 0;
  }
#pragma unroll 4
  for (int kk = 0; kk < nt; kk++) {
    const float pk = __shfl_sync(0xffffffffu, pr, kk);
    const T* vr = Vs + kk * d4;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
      const float4 v = dec_ld4(vr + voff[i]);
      const float pv = vin[i] ? pk : 0.f;
      acc[i][0] += pv * v.x;
      acc[i][1] += pv * v.y;
      acc[i][2] += pv * v.z;
      acc[i][3] += pv * v.w;
    }
  }
}

// The key loop on tensor cores (TC = 1: bf16, d 128, a block of every head
// of its kv head, at most 6, two blocks an SM; lower's choice where a
// split can hold DEC_MMA_MIN_KEYS keys, and the block's own where its
// split does at this position: with fewer, the FFMA loop runs, which
// measured faster at a tile or two a block). Each warp takes every
// nwarp-th tile of 16 keys of the block's split, for all the group's
// heads at once: S = q K^T as m16n8k16 MMAs (the heads as rows, those past
// the group zero; keys as columns), the online softmax by head, then O^T
// += V^T P^T (channels as rows, the heads as columns, P as two bf16 parts,
// so about 16 bits of it), a warp's tiles coming through a private ring
// of two stages by cp.async, so the loop needs no block barrier. A K or V
// row is DEC_MMA_PITCH bf16 (272 bytes: ldmatrix's 8 rows in distinct
// banks). Then the warps' (max, sum, O) meet in shared memory (the
// ring's) and warp h merges head h's in warp order into m, l and acc
// (channels 4*lane..4*lane+3) for the per-head epilogue the FFMA loop also
// ends in. An FFMA loop reads every K and V value once a head; this reads
// it once a block.
#define DEC_MMA_MIN_KEYS 96
#define DEC_MMA_KEYS 16
#define DEC_MMA_PITCH 136
#define DEC_MMA_STAGE (2 * DEC_MMA_KEYS * DEC_MMA_PITCH)
template <int NR>
__device__ __forceinline__ void dec_keys_mma(bf16_t* ring, const float* qs, int group, int lane, int j0, int j1, int p,
                                             bool fresh, const bf16_t* kT, const bf16_t* kx, const bf16_t* vx,
                                             const bf16_t* kc, const bf16_t* vc, int kvh, int window, long long rowstride,
                                             float scale, float& m, float& l, float (&acc)[1][4]) {
  const int warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5, g = lane >> 2, t = lane & 3;
  __syncthreads();  // every head's q is staged (and the norm's scratch, in the ring, read)
  // q as A fragments: row g is head g (rows g + 8 are zero: a1, a3).
  unsigned qa[8][2];
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    const float* qr = qs + g * 128 + 16 * kk + 2 * t;
    qa[kk][0] = g < group ? pack_bf16x2(qr[0], qr[1]) : 0u;
    qa[kk][1] = g < group ? pack_bf16x2(qr[8], qr[9]) : 0u;
  }
  const int ntl = j1 > j0 ? (j1 - j0 + DEC_MMA_KEYS - 1) / DEC_MMA_KEYS : 0;
  const int mine = ntl > warp ? (ntl - warp + nwarp - 1) / nwarp : 0;  // tiles warp, warp + nwarp, ...
  bf16_t* st0 = ring + warp * 2 * DEC_MMA_STAGE;
  // Tile i of this warp into stage i & 1: lane + 32r is row (lane + 32r) / 16,
  // chunk (lane + 32r) % 16; rows past the split zero-filled (p V must not
  // see stale values, even times 0).
  auto issue = [&](int i) {
    if (i < mine) {
      const int jt = j0 + (warp + i * nwarp) * DEC_MMA_KEYS, nt = min(DEC_MMA_KEYS, j1 - jt), s0 = att_slot(jt, window);
      bf16_t* K_ = st0 + (i & 1) * DEC_MMA_STAGE;
      bf16_t* V_ = K_ + DEC_MMA_KEYS * DEC_MMA_PITCH;
#pragma unroll
      for (int r = 0; r < DEC_MMA_KEYS / 2; r++) {
        const int u = lane + 32 * r, kk = u >> 4, c = (u & 15) * 8;
        bf16_t* kd = K_ + kk * DEC_MMA_PITCH + c;
        bf16_t* vd = V_ + kk * DEC_MMA_PITCH + c;
        if (kk < nt && fresh && jt + kk == p) {  // this step's key (kT may be shared memory)
          *reinterpret_cast<uint4*>(kd) = *reinterpret_cast<const uint4*>((NR ? kT : kx + (long long)kvh * 128) + c);
          *reinterpret_cast<uint4*>(vd) = *reinterpret_cast<const uint4*>(vx + (long long)kvh * 128 + c);
        } else {
          int slot = s0 + kk;  // att_slot(j, window): kk < DEC_MMA_KEYS <= window
          if (window > 0 && slot >= window) slot -= window;
          const long long off = kk < nt ? (long long)slot * rowstride + (long long)kvh * 128 + c : 0;
          const int bytes = kk < nt ? 16 : 0;
          cp_async16_fill(smem_u32(kd), kc + off, bytes);
          cp_async16_fill(smem_u32(vd), vc + off, bytes);
        }
      }
    }
    cp_async_commit();
  };
  float o[8][4];  // O^T: o[i] rows channels 16i + g (+8), columns heads 2t, 2t + 1
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[i][e] = 0.f;
  float mw = ATT_NEG_INF, lw = 0.f;  // head g's, over this warp's tiles
  issue(0);
  for (int i = 0; i < mine; i++) {
    issue(i + 1);
    cp_async_wait<1>();
    __syncwarp();  // tile i is in (every lane's copies and stores)
    const int nt = min(DEC_MMA_KEYS, j1 - j0 - (warp + i * nwarp) * DEC_MMA_KEYS);
    const bf16_t* K_ = st0 + (i & 1) * DEC_MMA_STAGE;
    const bf16_t* V_ = K_ + DEC_MMA_KEYS * DEC_MMA_PITCH;
    float s[2][4];  // S: s[j] keys 8j + 2t (+1) of head g (and g + 8)
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 8; kk += 2)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        unsigned b0, b1, b2, b3;  // keys 8j.., channels 16kk.., +8, +16, +24
        ldsm_x4(K_ + (8 * j + (lane & 7)) * DEC_MMA_PITCH + 16 * kk + 8 * (lane >> 3), b0, b1, b2, b3);
        const unsigned a0[4] = {qa[kk][0], 0u, qa[kk][1], 0u}, a1[4] = {qa[kk + 1][0], 0u, qa[kk + 1][1], 0u};
        mma_bf16(s[j], a0, b0, b1);
        mma_bf16(s[j], a1, b2, b3);
      }
    // Online softmax of head g over its 4 keys a lane and the 4 lanes of g.
    float x[4], mx = ATT_NEG_INF;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int key = 8 * (q >> 1) + 2 * t + (q & 1);
      x[q] = key < nt ? s[q >> 1][q & 1] * scale : ATT_NEG_INF;
      mx = fmaxf(mx, x[q]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(mw, mx);  // finite: a tile holds a key
    float ps = 0.f;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      x[q] = expf(x[q] - mnew);
      ps += x[q];
    }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
    const float alpha = expf(mw - mnew);  // 0 on the first tile
    lw = lw * alpha + ps;
    mw = mnew;
    // O^T's columns are heads 2t and 2t + 1, whose alpha lanes 8t and 8t + 4 hold.
    const float a_lo = __shfl_sync(0xffffffffu, alpha, 8 * t), a_hi = __shfl_sync(0xffffffffu, alpha, 8 * t + 4);
    // P^T (keys 2t (+1) and 8 + 2t (+1) of head g) as bf16 and the rest
    // of each float (exact in f32) as bf16 again: about 16 bits of P, so
    // that p V loses no more than the FFMA loop's float products.
    const unsigned ph0 = pack_bf16x2(x[0], x[1]), ph1 = pack_bf16x2(x[2], x[3]);
    const unsigned pl0 = pack_bf16x2(x[0] - __uint_as_float(ph0 << 16), x[1] - __uint_as_float(ph0 & 0xffff0000u));
    const unsigned pl1 = pack_bf16x2(x[2] - __uint_as_float(ph1 << 16), x[3] - __uint_as_float(ph1 & 0xffff0000u));
#pragma unroll
    for (int i2 = 0; i2 < 8; i2++) {
      o[i2][0] *= a_lo;
      o[i2][1] *= a_hi;
      o[i2][2] *= a_lo;
      o[i2][3] *= a_hi;
      unsigned a[4];  // V^T rows channels 16i2.. (+8), columns keys 0-7, 8-15
      ldsm_x4_t(V_ + (8 * (lane >> 4) + (lane & 7)) * DEC_MMA_PITCH + 16 * i2 + 8 * ((lane >> 3) & 1), a[0], a[1], a[2], a[3]);
      mma_bf16(o[i2], a, ph0, ph1);
      mma_bf16(o[i2], a, pl0, pl1);
    }
    __syncwarp();  // the stage is read before the next issue refills it
  }
  // The warps meet: O^T as [warp][head][128] floats, (max, sum) as
  // [warp][head], in the ring (every warp past its tiles).
  __syncthreads();
  float* mo = reinterpret_cast<float*>(ring);
  float2* ml = reinterpret_cast<float2*>(mo + nwarp * group * 128);
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int h = 2 * t + (e & 1), c = 16 * i + g + 8 * (e >> 1);
      if (h < group) mo[(warp * group + h) * 128 + c] = o[i][e];
    }
  if (t == 0 && g < group) ml[warp * group + g] = make_float2(mw, lw);
  __syncthreads();
  if (warp >= group) return;  // none: lower runs a warp a head
  m = ATT_NEG_INF;
  for (int w = 0; w < nwarp; w++) {
    const float2 v = ml[w * group + warp];
    if (v.y > 0.f) m = fmaxf(m, v.x);
  }
  l = 0.f;
#pragma unroll
  for (int e = 0; e < 4; e++) acc[0][e] = 0.f;
  for (int w = 0; w < nwarp; w++) {
    const float2 v = ml[w * group + warp];
    if (v.y > 0.f) {
      const float f = expf(v.x - m);
      const float4 a = *reinterpret_cast<const float4*>(mo + (w * group + warp) * 128 + 4 * lane);
      l += v.y * f;
      acc[0][0] += a.x * f;
      acc[0][1] += a.y * f;
      acc[0][2] += a.z * f;
      acc[0][3] += a.w * f;
    }
  }
}

// Fused q/k norm and rope (NR = 1, fuseNormRoPEAttention in lower): q and
// this step's k (kx) arrive as the q,k,v GEMV wrote them, and the kernel
// does what qk_norm_rope (rope.cu) would have done first, with its code
// (rope_stage, rope_channel) and its rounding to T: each warp its q head
// (staged in the K tile's space before the first tile), and every block
// whose keys include pos this token's k head (warp 0, into kT; the block
// that appends it writes kT to the cache). qw, kw: the norms' weights
// (null: no norm), eps, inv_freq, rot, attnf: as qk_norm_rope's. Same bits
// as the two launches. NR = 2 (fuseRowsKNormRoPEAttention): k alone, q
// read as given (rotated by its own launch, once a row rather than again in
// every split's block).
template <typename T, int NCH, int NR, int ST, int TC>
__global__ void __launch_bounds__(TC ? 192 : 32 * DEC_HEADS, TC ? 2 : 1)
    attn_decode(int nh, int nkv, int d, int window, int slots, int nsplit, float scale, const int* __restrict__ pos,
                const int* __restrict__ seq, long long seq_stride, const T* q, const T* kx, const T* vx, T* kc, T* vc,
                const T* gate, long long ldg, int G, T* out, float* part_acc, float* part_ml,
                unsigned int* counters, signed char* xq, float4* xs, const float* __restrict__ qw,
                const float* __restrict__ kw, float eps, const float* __restrict__ inv_freq, int rot, float attnf) {
  pdl_wait();
  extern __shared__ __align__(16) float dec_smem[];
  const int VN = DecVec<T>::N;
  int group = nh / nkv;
  int kvh = blockIdx.y, split = blockIdx.x;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthr = blockDim.x;
  int hb = nthr >> 5;                      // heads (warps) per block
  int zh = (group + hb - 1) / hb;          // head blocks per row
  int row = blockIdx.z / zh, hz = blockIdx.z - row * zh;
  int g = hz * hb + warp;                  // this warp's head in the group
  bool active = g < group;                 // uniform per warp
  // Row `row` of a batched step: its own query, keys, output, gate,
  // partials (offset after the key loop, which need not hold them),
  // position and sequence slot (seq null: every row is slot 0).
  int sq = seq ? seq[row] : 0;
  q += (long long)row * nh * d;
  out += (long long)row * nh * d;
  if (kx) {
    kx += (long long)row * nkv * d;
    vx += (long long)row * nkv * d;
  }
  pos += row;
  if (xq) {  // the quantised copy of row `row` (q8x_quantize's layout)
    xq += (long long)row * nh * d;
    xs += (long long)row * nh * d / 32;
  }
  long long head = (long long)kvh * group + g;
  if (sq < 0) {  // a bucket's padding row: no cache, zero output (written by split 0)
    if (split == 0 && active) {
      for (int c = lane; c < d; c += 32) out[head * d + c] = from_f32<T>(0.f);
      if (xq) {
        float z[NCH][4] = {};
        dec_q8x<NCH>(z, lane, d, (int)head, xq, xs);
      }
    }
    return;
  }
  kc += (long long)sq * seq_stride;
  vc += (long long)sq * seq_stride;
  int d4 = (d + 3) & ~3, kp = dec_tpitch<T>(d4);
  float* qs = dec_smem;                    // [hb][d4]
  float* scr = qs + hb * d4;               // the q and k heads' norm and rotation, before the tiles
  T* Ks = reinterpret_cast<T*>(scr);       // [DEC_TILE][kp]
  T* Vs = Ks + DEC_TILE * kp;              // [DEC_TILE][d4]

  int p;
  // NR: q and k heads staged with 4 channels a lane where qk_norm_rope
  // would have (its vector path: d and the pointers aligned to 4 values).
  const bool nr4 = (d & 3) == 0 && (((NR == 1 ? (unsigned long long)q : 0ull) | ((unsigned long long)kx)) & (4 * sizeof(T) - 1)) == 0;
  if constexpr (NR == 1) {
    p = *pos;
    if (active) {  // uniform per warp
      float* b = scr + warp * d;
      dec_rope_stage(nr4, d, q + head * d, b, qw, eps);
      for (int c = lane; c < d4; c += 32)
        qs[warp * d4 + c] = c < d ? to_f32(from_f32<T>(rope_channel(b, c, rot, (float)p, inv_freq, attnf))) : 0.f;
    } else {
      for (int c = lane; c < d4; c += 32) qs[warp * d4 + c] = 0.f;
    }
  } else {
    // q first: it does not wait for pos.
    for (int c = lane; c < d4; c += 32) qs[warp * d4 + c] = active && c < d ? to_f32(q[head * d + c]) : 0.f;
    p = *pos;
  }
  int last = p;
  if (window == 0 && last >= slots) last = slots - 1;  // guard only: the host keeps p < slots
  int first = window > 0 ? max(0, p - window + 1) : 0;
  int n = last - first + 1;
  int per = (n + nsplit - 1) / nsplit;
  int j0 = first + split * per;
  int j1 = min(j0 + per, last + 1);
  long long rowstride = (long long)nkv * d;
  bool fresh = kx != nullptr;  // this step's k, v come from kx, vx

  // NR: this token's k head, normalised and rotated (past scr's use and
  // every stage of the tile ring).
  T* kT = TC ? Ks + hb * 2 * DEC_MMA_STAGE : Ks + (ST >= 2 ? ST : 1) * DEC_TILE * (kp + d4);
  if constexpr (NR) {
    if (fresh && p >= j0 && p < j1) {  // uniform per block
      if (warp == 0) {
        float* b = scr + hb * d;  // past the q heads' staging
        dec_rope_stage(nr4, d, kx + (long long)kvh * d, b, kw, eps);
        for (int c = lane; c < d; c += 32) kT[c] = from_f32<T>(rope_channel(b, c, rot, (float)p, inv_freq, attnf));
      }
      __syncthreads();
      if (hz == 0) {
        long long dst = (long long)att_slot(p, window) * rowstride + (long long)kvh * d;
        for (int c = tid; c < d; c += nthr) {
          kc[dst + c] = kT[c];
          vc[dst + c] = vx[(long long)kvh * d + c];
        }
      }
    }
  } else if (fresh && hz == 0 && p >= j0 && p < j1) {
    long long dst = (long long)att_slot(p, window) * rowstride + (long long)kvh * d;
    for (int c = tid; c < d; c += nthr) {
      kc[dst + c] = kx[(long long)kvh * d + c];
      vc[dst + c] = vx[(long long)kvh * d + c];
    }
  }
  bool vec = d % VN == 0 &&
             (((unsigned long long)kc | (unsigned long long)vc | (fresh ? (unsigned long long)kx | (unsigned long long)vx : 0ull)) & 15ull) == 0;
  // With the block's threads a multiple of a row's chunks (cpr), thread
  // tid always loads chunk tc of keys tk, tk + kst, ... of a tile (and
  // with a ring of at least a tile, a tile's slots wrap at most once).
  const int cpr = vec ? d / VN : 1;
  const bool fixed_chunk = vec && nthr % cpr == 0 && (window == 0 || window >= DEC_TILE);
  const int tc = (tid % cpr) * VN, tk = tid / cpr, kst = nthr / cpr;

  float m = ATT_NEG_INF, l = 0.f;
  float acc[NCH][4];
#pragma unroll
  for (int i = 0; i < NCH; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[i][e] = 0.f;

  const float* qr = qs + warp * d4;
  // The key loop: on tensor cores (TC, and this block's split holding
  // DEC_MMA_MIN_KEYS keys or more at this position), through a ring of ST
  // tiles, or through registers; rows not 16-byte aligned take the last.
  bool piped = false, mma = false;
  if constexpr (ST >= 2) piped = fixed_chunk;
  if constexpr (TC) mma = vec && j1 - j0 >= DEC_MMA_MIN_KEYS;
  if (mma) {
    if constexpr (TC) {
      static_assert(sizeof(T) == 2 && NCH == 1, "the tensor-core loop is bf16 and head_dim 128's (lower's DecodeTC)");
      dec_keys_mma<NR>(Ks, qs, group, lane, j0, j1, p, fresh, kT, kx, vx, kc, vc, kvh, window, rowstride, scale, m, l, acc);
    }
  } else if (piped) {
    // ST >= 2 (lower's choice where a block walks many tiles): a ring of ST
    // tiles filled by cp.async, ST - 1 tiles ahead of the one being read,
    // so a tile's loads hold no registers and wait behind the tiles before
    // it rather than in front of its own scores. The same tile arithmetic
    // (dec_tile) in the same order as the synchronous loop: the same bits.
    const int ntl = j1 > j0 ? (j1 - j0 + DEC_TILE - 1) / DEC_TILE : 0, stg = DEC_TILE * (kp + d4);
    auto issue = [&](int t) {  // tile t into stage t % ST
      if (t < ntl) {
        const int jt = j0 + t * DEC_TILE, nt = min(DEC_TILE, j1 - jt), s0 = att_slot(jt, window);
        T* K_ = Ks + (t % ST) * stg;
        T* V_ = K_ + DEC_TILE * kp;
        for (int kk = tk; kk < nt; kk += kst) {
          T* kd = K_ + kk * kp + tc;
          T* vd = V_ + kk * d4 + tc;
          if (fresh && jt + kk == p) {  // this step's key (kT may be shared memory): stored as it is read
            const T* ks = NR ? kT + tc : kx + (long long)kvh * d + tc;
            dec_stv(kd, *reinterpret_cast<const uint4*>(ks));
            dec_stv(vd, *reinterpret_cast<const uint4*>(vx + (long long)kvh * d + tc));
          } else {
            int slot = s0 + kk;  // att_slot(j, window): kk < DEC_TILE <= window
            if (window > 0 && slot >= window) slot -= window;
            const long long off = (long long)slot * rowstride + (long long)kvh * d + tc;
            if constexpr (sizeof(T) == 4) {
              cp_async16(kd, kc + off);
            } else {  // K rows are 8-byte aligned (dec_tpitch)
              cp_async8(kd, kc + off);
              cp_async8(kd + VN / 2, kc + off + VN / 2);
            }
            cp_async16(vd, vc + off);
          }
        }
      }
      cp_async_commit();
    };
    if constexpr (NR) __syncthreads();  // the norm and rotation's scratch (stage 0) is read
    for (int t = 0; t < ST - 1; t++) issue(t);
    for (int t = 0; t < ntl; t++) {
      cp_async_wait<ST - 2>();
      __syncthreads();  // tile t is in; tile t - 1's stage, refilled next, is read
      issue(t + ST - 1);
      const T* K_ = Ks + (t % ST) * stg;
      if (active) dec_tile<T, NCH>(K_, K_ + DEC_TILE * kp, kp, d4, qr, min(DEC_TILE, j1 - j0 - t * DEC_TILE), lane, scale, m, l, acc);
    }
  } else {
    for (int jt = j0; jt < j1; jt += DEC_TILE) {
      int nt = min(DEC_TILE, j1 - jt);
      __syncthreads();  // the previous tile's readers are done (and q is stored)
      if (fixed_chunk) {
        // The thread's chunk is fixed (tc) and its keys step by kst: no
        // division or modulo per load (the earlier form, i / cpr and j %
        // window per load, spent about 50 instructions a load on them).
        const int s0 = att_slot(jt, window);
        for (int kb = 0; kb < nt; kb += DEC_LD * kst) {
          uint4 kr[DEC_LD], vr[DEC_LD];
#pragma unroll
          for (int u = 0; u < DEC_LD; u++) {
            const int kk = kb + u * kst + tk, j = jt + kk;
            if (kk < nt) {
              const T* ks;
              const T* vs;
              if (fresh && j == p) {
                ks = NR ? kT + tc : kx + (long long)kvh * d + tc;
                vs = vx + (long long)kvh * d + tc;
              } else {
                int slot = s0 + kk;  // att_slot(j, window): kk < DEC_TILE <= window
                if (window > 0 && slot >= window) slot -= window;
                const long long off = (long long)slot * rowstride + (long long)kvh * d + tc;
                ks = kc + off;
                vs = vc + off;
              }
              kr[u] = *reinterpret_cast<const uint4*>(ks);
              vr[u] = *reinterpret_cast<const uint4*>(vs);
            }
          }
#pragma unroll
          for (int u = 0; u < DEC_LD; u++) {
            const int kk = kb + u * kst + tk;
            if (kk < nt) {
              dec_stv(Ks + kk * kp + tc, kr[u]);
              dec_stv(Vs + kk * d4 + tc, vr[u]);
            }
          }
        }
      } else {  // unaligned rows, d not a multiple of the vector, or chunks not fitting the
                // block (vec without fixed_chunk: rare shapes): element by element, tail zeroed
        for (int i = tid; i < nt * d4; i += nthr) {
          int kk = i / d4, c = i - kk * d4, j = jt + kk;
          T kv = from_f32<T>(0.f), vv = kv;
          if (c < d) {
            if (fresh && j == p) {
              kv = NR ? kT[c] : kx[(long long)kvh * d + c];
              vv = vx[(long long)kvh * d + c];
            } else {
              long long off = (long long)att_slot(j, window) * rowstride + (long long)kvh * d + c;
              kv = kc[off];
              vv = vc[off];
            }
          }
          Ks[kk * kp + c] = kv;
          Vs[kk * d4 + c] = vv;
        }
      }
      __syncthreads();
      if (active) dec_tile<T, NCH>(Ks, Vs, kp, d4, qr, nt, lane, scale, m, l, acc);
    }
  }
  if (gate) gate += (long long)row * ldg;
  if (nsplit == 1) {
    if (!active) return;
    float inv = 1.f / l;
#pragma unroll
    for (int i = 0; i < NCH; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][e] *= inv;
    float gf[NCH][4];
    dec_gate<T, NCH>(gf, lane, d, nh, (int)head, gate, G);
    dec_write<T, NCH>(out, acc, lane, d, (int)head, gf, xq, xs);
    return;
  }
  // Partials: part_acc [nsplit][nh][d], part_ml [nsplit][nh][2] (max, sum).
  // An empty split (short contexts) writes max -inf, sum 0, acc 0.
  part_acc += (long long)row * nsplit * nh * d;
  part_ml += (long long)row * nsplit * nh * 2;
  if (active) {
    long long ph = (long long)split * nh + head;
#pragma unroll
    for (int i = 0; i < NCH; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int c = 4 * (lane + 32 * i) + e;
        if (c < d) part_acc[ph * d + c] = acc[i][e];
      }
    if (lane == 0) {
      part_ml[ph * 2] = m;
      part_ml[ph * 2 + 1] = l;
    }
  }
  float gf[NCH][4];
  if (active) dec_gate<T, NCH>(gf, lane, d, nh, (int)head, gate, G);
  // Publish the partials, then count this block done; the last one of the
  // group merges (and returns the counter to 0 for the next launch).
  if (!last_block(counters + (long long)blockIdx.z * nkv + kvh, nsplit) || !active) return;
  float o[NCH][4];
  if ((d & 3) == 0)
    dec_merge<NCH, true>(o, part_acc, part_ml, nsplit, nh, d, (int)head, lane);
  else
    dec_merge<NCH, false>(o, part_acc, part_ml, nsplit, nh, d, (int)head, lane);
  dec_write<T, NCH>(out, o, lane, d, (int)head, gf, xq, xs);
}

// ---------------------------------------------------------------------------
// Prefill (a chunk of ntok tokens at consecutive positions pos[0], pos[0]+1,
// ...). Keys before pos[0] come from the cache (linear, or the ring, which
// holds the window before the chunk); the chunk's own keys are read from k
// and v directly, so a chunk longer than a window never reads a ring slot
// it would overwrite (kv_compact_ring / kv_append run after).
//
// Flash-attention style: a block takes ATT_BQ rows of one kv head, a row
// being a (token, query head of the group) pair, so every K/V tile loaded
// serves the whole group. It walks ATT_BK-key tiles from the first key any
// of its rows can see to the last, so tiles wholly outside a sliding window
// (or past the causal diagonal) are never visited; an online softmax in
// float32 keeps running max and sum per row. 128 threads: scores by 2x4
// register tiles, output rows 8 per warp with DCH channel chunks of 32 per
// lane (d <= 32*DCH).
//
// With gate != null the output is multiplied by the output gate as it is
// written (attention_gate), as in attn_decode.
//
// Dynamic shared memory (floats, dp = 32*DCH): Q [BQ][dp+1], K [BK][dp+1],
// V [BK][dp], S [BQ][BK+1], and 4*BQ for row max, sum, rescale, position.

#define ATT_BQ 32
#define ATT_BK 32

template <typename T, int DCH>
__global__ void __launch_bounds__(128) attn_prefill(int ntok, int nh, int nkv, int d, int window, int slots,
                                                    float scale, const int* __restrict__ pos,
                                                    const T* __restrict__ q, long long ldq,
                                                    const T* __restrict__ k, const T* __restrict__ v,
                                                    long long ldkv, const T* __restrict__ kc,
                                                    const T* __restrict__ vc, T* __restrict__ out,
                                                    long long ldo, const T* __restrict__ gate, long long ldg,
                                                    int G) {
  pdl_wait();
  const int dp = 32 * DCH;
  extern __shared__ float pf_smem[];
  float* Qs = pf_smem;                  // [BQ][dp+1]
  float* Ks = Qs + ATT_BQ * (dp + 1);   // [BK][dp+1]
  float* Vs = Ks + ATT_BK * (dp + 1);   // [BK][dp]
  float* S = Vs + ATT_BK * dp;          // [BQ][BK+1]
  float* rm = S + ATT_BQ * (ATT_BK + 1);  // [BQ]
  float* rl = rm + ATT_BQ;
  float* ra = rl + ATT_BQ;
  int* rp = (int*)(ra + ATT_BQ);

  int group = nh / nkv;
  int kvh = blockIdx.y;
  int R = ntok * group;
  int r0 = blockIdx.x * ATT_BQ;
  int nr = min(ATT_BQ, R - r0);
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int p0 = pos[0];

  for (int i = tid; i < ATT_BQ * dp; i += blockDim.x) {
    int r = i / dp, c = i - r * dp;
    float val = 0.f;
    if (r < nr && c < d) {
      int row = r0 + r, t = row / group, h = kvh * group + row % group;
      val = to_f32(q[t * ldq + (long long)h * d + c]);
    }
    Qs[r * (dp + 1) + c] = val;
  }
  if (tid < ATT_BQ) {
    rp[tid] = tid < nr ? pos[(r0 + tid) / group] : -1;
    rm[tid] = ATT_NEG_INF;
    rl[tid] = 0.f;
  }
  int plo = pos[r0 / group], phi = pos[(r0 + nr - 1) / group];
  int jlo = window > 0 ? max(0, plo - window + 1) : 0;
  int jhi = phi;

  float o[8][DCH];
#pragma unroll
  for (int rr = 0; rr < 8; rr++)
#pragma unroll
    for (int i = 0; i < DCH; i++) o[rr][i] = 0.f;

  long long crow = (long long)nkv * d;
  int tq = tid >> 3, tk = tid & 7;  // score tile: rows 2tq, 2tq+1; keys tk + 8i
  int sr = tid >> 2, sub = tid & 3;  // softmax: 4 threads per row, 8 keys each
  __syncthreads();

  for (int j0 = jlo; j0 <= jhi; j0 += ATT_BK) {
    for (int i = tid; i < ATT_BK * dp; i += blockDim.x) {
      int kk = i / dp, c = i - kk * dp;
      int j = j0 + kk;
      float kv = 0.f, vv = 0.f;
      if (j <= jhi && c < d) {
        if (j >= p0) {
          long long off = (long long)(j - p0) * ldkv + (long long)kvh * d + c;
          kv = to_f32(k[off]);
          vv = to_f32(v[off]);
        } else if (att_slot(j, window) < slots) {  // guard only: the host keeps pos < slots
          long long off = (long long)att_slot(j, window) * crow + (long long)kvh * d + c;
          kv = to_f32(kc[off]);
          vv = to_f32(vc[off]);
        }
      }
      Ks[kk * (dp + 1) + c] = kv;
      Vs[kk * dp + c] = vv;
    }
    __syncthreads();

    float s[2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
      for (int b = 0; b < 4; b++) s[a][b] = 0.f;
    const float* q0 = Qs + (2 * tq) * (dp + 1);
    const float* q1 = q0 + (dp + 1);
    for (int c = 0; c < d; c++) {
      float a0 = q0[c], a1 = q1[c];
#pragma unroll
      for (int b = 0; b < 4; b++) {
        float kv = Ks[(tk + 8 * b) * (dp + 1) + c];
        s[0][b] += a0 * kv;
        s[1][b] += a1 * kv;
      }
    }
#pragma unroll
    for (int a = 0; a < 2; a++) {
      int r = 2 * tq + a;
      int pr = rp[r];
#pragma unroll
      for (int b = 0; b < 4; b++) {
        int kk = tk + 8 * b, j = j0 + kk;
        bool ok = r < nr && j <= pr && j <= jhi && (window == 0 || j > pr - window);
        S[r * (ATT_BK + 1) + kk] = ok ? s[a][b] * scale : ATT_NEG_INF;
      }
    }
    __syncthreads();

    {
      float* srow = S + sr * (ATT_BK + 1) + sub * 8;
      float mx = ATT_NEG_INF;
#pragma unroll
      for (int x = 0; x < 8; x++) mx = fmaxf(mx, srow[x]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float mold = rm[sr];
      float mnew = fmaxf(mold, mx);
      float sum = 0.f, alpha = 1.f;
      if (mnew == ATT_NEG_INF) {  // nothing visible yet in this row
#pragma unroll
        for (int x = 0; x < 8; x++) srow[x] = 0.f;
      } else {
        alpha = expf(mold - mnew);
#pragma unroll
        for (int x = 0; x < 8; x++) {
          float e = expf(srow[x] - mnew);
          srow[x] = e;
          sum += e;
        }
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (sub == 0) {
        rl[sr] = rl[sr] * alpha + sum;
        rm[sr] = mnew;
        ra[sr] = alpha;
      }
    }
    __syncthreads();

#pragma unroll
    for (int rr = 0; rr < 8; rr++) {
      float a = ra[warp * 8 + rr];
#pragma unroll
      for (int i = 0; i < DCH; i++) o[rr][i] *= a;
    }
    for (int kk = 0; kk < ATT_BK; kk++) {
      float vv[DCH];
#pragma unroll
      for (int i = 0; i < DCH; i++) vv[i] = Vs[kk * dp + lane + 32 * i];
#pragma unroll
      for (int rr = 0; rr < 8; rr++) {
        float pr = S[(warp * 8 + rr) * (ATT_BK + 1) + kk];
#pragma unroll
        for (int i = 0; i < DCH; i++) o[rr][i] += pr * vv[i];
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int rr = 0; rr < 8; rr++) {
    int r = warp * 8 + rr;
    if (r < nr) {
      int row = r0 + r, t = row / group, h = kvh * group + row % group;
      float inv = 1.f / rl[r];
      const T* gr = gate ? gate + t * ldg : nullptr;
#pragma unroll
      for (int i = 0; i < DCH; i++) {
        int c = lane + 32 * i;
        if (c < d) out[t * ldo + (long long)h * d + c] = from_f32<T>(o[rr][i] * inv * gate_of(gr, nh, d, G, h, c));
      }
    }
  }
}
