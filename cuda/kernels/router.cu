// MoE router: for each token's expert logits (float32 normally), optionally
// soft-capped (softcap > 0: c*tanh(l/c)), s = sigmoid(l); the top k experts
// by s + bias (bias only chooses; null: none) are chosen, best first, and
// weighted s / sum(chosen s) * scaling.
//
// Exactly as exec/cpu.RouterTopK computes it, so the same experts are
// chosen: tanh and the sigmoid in double rounded once to float (as the
// reference does), ties to the lower expert index, NaN above every number,
// the sum in selection order.
//
// A candidate is one 64-bit key, ord_key(ord_bits(s + bias), expert)
// (prelude.cuh), so a plain unsigned maximum picks the best score and,
// among equal scores, the lower index; a taken expert's ord is 0, below
// every candidate's.
//
// router_topk: a warp per token (E <= 1024, k <= 32), the token's scores in
// registers (lane l holds experts l, l+32, ...); a selection round is the
// lanes' own best and a warp maximum of two redux.sync instructions, with
// no shared memory and no barrier. router_topk_block: a block per token for
// larger E or k and for few tokens, its threads scoring the experts, then
// (rt_select) one warp selecting as router_topk does for E <= 256 and k <=
// 32 (rt_warp_select), else each expert ranked against every key
// (rt_block_select). router_fused: the router GEMV and that selection in
// one launch, for decode.

// The sigmoid score of logit l, soft-capped first when softcap > 0.
template <typename T> __device__ __forceinline__ float rt_score(T logit, float softcap) {
  float l = to_f32(logit);
  if (softcap > 0.f) l = (float)tanh((double)(l / softcap)) * softcap;
  return (float)(1.0 / (1.0 + exp(-(double)l)));
}

// A warp per token, up to 4 tokens per block; PER = experts per lane, a
// power of two with 32*PER >= E. Token t's routes are weights and ids
// [t*(k+S), t*(k+S)+k), then (S > 0, k+S <= 32) its S shared experts
// first..first+S-1 with weight 1, as moe_add_shared appends them.
template <typename T, int PER>
__device__ __forceinline__ void router_topk_body(int ntok, int E, int k, float softcap, float scaling,
                                                 const T* __restrict__ logits, long long ld, const float* __restrict__ bias,
                                                 float* __restrict__ weights, int* __restrict__ ids, int S, int first) {
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= ntok) return;  // the whole warp
  float score[PER];
  unsigned int ord[PER];  // 0: taken, or no expert
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int e = lane + 32 * i;
    score[i] = 0.f;
    ord[i] = 0u;
    if (e < E) {
      score[i] = rt_score(logits[t * ld + e], softcap);
      ord[i] = ord_bits(bias != nullptr ? score[i] + bias[e] : score[i]);
    }
  }
  int mine = 0;  // lane j: the j-th choice
  for (int j = 0; j < k; j++) {
    // This lane's best key (a tree, log2(PER) deep), then the warp's.
    // Every untaken expert's key is above a taken one's (ord 0), and
    // k <= E leaves one.
    unsigned long long key[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) key[i] = ord_key(ord[i], lane + 32 * i);
#pragma unroll
    for (int w = PER / 2; w > 0; w /= 2)
#pragma unroll
      for (int i = 0; i < w; i++) key[i] = max_u64(key[i], key[i + w]);
    const int e = key_index(warp_max_u64(key[0]));
#pragma unroll
    for (int i = 0; i < PER; i++)
      if (lane + 32 * i == e) ord[i] = 0u;
    if (lane == j) mine = e;
  }
  // Lane j fetches its choice's score from the lane that holds it.
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const float v = __shfl_sync(0xffffffffu, score[i], mine & 31);
    if (i == mine >> 5) s = v;
  }
  float sum = 0.f;
  for (int j = 0; j < k; j++) sum += __shfl_sync(0xffffffffu, s, j);
  const long long r0 = (long long)t * (k + S);
  if (lane < k) {
    weights[r0 + lane] = s / sum * scaling;
    ids[r0 + lane] = mine;
  } else if (lane < k + S) {
    weights[r0 + lane] = 1.f;
    ids[r0 + lane] = first + (lane - k);
  }
}

template <typename T, int PER>
__global__ void __launch_bounds__(128) router_topk(int ntok, int E, int k, float softcap, float scaling,
                                                   const T* __restrict__ logits, long long ld,
                                                   const float* __restrict__ bias, float* __restrict__ weights,
                                                   int* __restrict__ ids) {
  pdl_wait();
  router_topk_body<T, PER>(ntok, E, k, softcap, scaling, logits, ld, bias, weights, ids, 0, 0);
}

// router_topk_shared is router_topk with the S shared experts' routes
// appended to every token's (lower.TopKShared: moe_add_shared's work,
// the same bits).
template <typename T, int PER>
__global__ void __launch_bounds__(128) router_topk_shared(int ntok, int E, int k, float softcap, float scaling,
                                                          const T* __restrict__ logits, long long ld,
                                                          const float* __restrict__ bias, float* __restrict__ weights,
                                                          int* __restrict__ ids, int S, int first) {
  pdl_wait();
  router_topk_body<T, PER>(ntok, E, k, softcap, scaling, logits, ld, bias, weights, ids, S, first);
}

// rt_keys: the block's threads score every expert (score[e]) and key it
// for the choice (key[e]: the score plus its bias, then the index), then a
// barrier: the first half of either block selection.
template <typename L>
__device__ __forceinline__ void rt_keys(L logit, int E, float softcap, const float* __restrict__ bias, unsigned long long* key,
                                        float* score) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float s = rt_score(logit(e), softcap);
    score[e] = s;
    key[e] = ord_key(ord_bits(bias != nullptr ? s + bias[e] : s), e);
  }
  __syncthreads();
}

// rt_block_select: a block's choice for one token, logit(e) giving expert
// e's logit; key and score are E entries of shared memory, chosen k. Keys
// are unique, so an expert's rank is the number of keys above its own, and
// the experts of rank < k are the choices, best first: one pass over the
// keys per expert between two barriers, instead of k rounds of a block
// maximum with a barrier each. It returns after the barrier that follows
// thread 0's writes of weights and ids.
template <typename L>
__device__ __forceinline__ void rt_block_select(L logit, int E, int k, float softcap, float scaling,
                                                const float* __restrict__ bias, unsigned long long* key, float* score,
                                                int* chosen, float* __restrict__ weights, int* __restrict__ ids) {
  const int tid = threadIdx.x;
  rt_keys(logit, E, softcap, bias, key, score);
  for (int e = tid; e < E; e += blockDim.x) {
    const unsigned long long m = key[e];
    int rank = 0;  // every thread reads the same key: a broadcast
    for (int i = 0; i < E; i++) rank += key[i] > m;
    if (rank < k) chosen[rank] = e;
  }
  __syncthreads();
  // The sum in selection order, as the reference adds.
  if (tid == 0) {
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += score[chosen[j]];
    for (int j = 0; j < k; j++) {
      weights[j] = score[chosen[j]] / sum * scaling;
      ids[j] = chosen[j];
    }
  }
  __syncthreads();
}

// rt_warp_select is rt_block_select's choice, the same bits, with the
// ranking done by warp 0 in k rounds of a warp maximum over the keys (its
// lanes holding RT_WARP_PER each) and the weights by lanes: for E <= 32 *
// RT_WARP_PER and k <= 32 (rt_select), where rt_block_select's ranking (E
// keys read by every thread) and thread 0's serial loops were most of the
// decode router's last block, which every later launch of the layer waits
// for (docs/PERF.md, 2026-12-04 from 11:59: that tail cost 3.75 us a MoE
// layer; this selection took 1.6 us off it).
#define RT_WARP_PER 8
template <typename L>
__device__ __forceinline__ void rt_warp_select(L logit, int E, int k, float softcap, float scaling,
                                               const float* __restrict__ bias, unsigned long long* key, float* score,
                                               float* __restrict__ weights, int* __restrict__ ids) {
  const int tid = threadIdx.x, lane = tid & 31;
  rt_keys(logit, E, softcap, bias, key, score);
  if (tid < 32) {
    unsigned long long kv[RT_WARP_PER];  // 0 once taken: below every candidate
#pragma unroll
    for (int i = 0; i < RT_WARP_PER; i++) kv[i] = lane + 32 * i < E ? key[lane + 32 * i] : 0ull;
    int mine = 0;  // lane j: the j-th choice
    for (int j = 0; j < k; j++) {
      unsigned long long m[RT_WARP_PER];
#pragma unroll
      for (int i = 0; i < RT_WARP_PER; i++) m[i] = kv[i];
#pragma unroll
      for (int w = RT_WARP_PER / 2; w > 0; w /= 2)
#pragma unroll
        for (int i = 0; i < w; i++) m[i] = max_u64(m[i], m[i + w]);
      const int e = key_index(warp_max_u64(m[0]));
#pragma unroll
      for (int i = 0; i < RT_WARP_PER; i++)
        if (lane + 32 * i == e) kv[i] = 0ull;
      if (lane == j) mine = e;
    }
    // The sum in selection order, as the reference adds.
    const float s = lane < k ? score[mine] : 0.f;
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += __shfl_sync(0xffffffffu, s, j);
    if (lane < k) {
      weights[lane] = s / sum * scaling;
      ids[lane] = mine;
    }
  }
  __syncthreads();
}

// rt_select is rt_warp_select where it applies, else rt_block_select.
template <typename L>
__device__ __forceinline__ void rt_select(L logit, int E, int k, float softcap, float scaling, const float* __restrict__ bias,
                                          unsigned long long* key, float* score, int* chosen, float* __restrict__ weights,
                                          int* __restrict__ ids) {
  if (E <= 32 * RT_WARP_PER && k <= 32)
    rt_warp_select(logit, E, k, softcap, scaling, bias, key, score, weights, ids);
  else
    rt_block_select(logit, E, k, softcap, scaling, bias, key, score, chosen, weights, ids);
}

// A block per token (a thread per expert up to 1024, more each beyond), for
// E > 1024 or k > 32, and for few tokens (RouterBlockMaxT), where a block's
// threads score its experts (and then rank them, or one warp selects:
// rt_select) faster than a warp does it all.
//
// Dynamic shared memory: E 64-bit keys, E floats (s), k ints (chosen).
template <typename T>
__global__ void router_topk_block(int ntok, int E, int k, float softcap, float scaling, const T* __restrict__ logits,
                                  long long ld, const float* __restrict__ bias, float* __restrict__ weights,
                                  int* __restrict__ ids) {
  pdl_wait();
  extern __shared__ unsigned long long rt_smem[];
  const int t = blockIdx.x;
  if (t >= ntok) return;
  const T* row = logits + t * ld;
  rt_select([&](int e) { return row[e]; }, E, k, softcap, scaling, bias, rt_smem, (float*)(rt_smem + E),
                  (int*)((float*)(rt_smem + E) + E), weights + (long long)t * k, ids + (long long)t * k);
}

// router_fused: the decode router in one launch, the GEMV's logits and the
// selection. router.cu is compiled after matmul.cu (exec/gpu's sourceDeps,
// rather than the GEMV moving into prelude.cuh, which every file compiles),
// so each block computes its logit rows with matmul.cu's gemv_block, the
// same code as the gemv launch it replaces, with the same grid and split:
// the same bits. Each block then counts itself done in *counter; the last
// one (the others' logits published by their fences) selects each of the R
// tokens' experts as router_topk_block does and returns the counter to 0
// for the next launch (a replayed graph). logits f32 [R, E], written as the
// GEMV writes them.
//
// Dynamic shared memory: router_topk_block's. Launch bounds (256, 1):
// under (256) ptxas spilled at R = 8 to fit 64 registers. router_fused_body
// is block blk of nblk such blocks (router_qgemv.cu runs it beside a GEMV).
// SH: each token's routes are k + S apart, its S shared experts first ..
// first + S - 1 appended with weight 1 (router_fused_shared).
template <typename TX, typename TW, int R, int VEC, bool SH = false>
__device__ __forceinline__ void router_fused_body(int blk, int nblk, int E, int K, int split, const TX* __restrict__ x,
                                                  const TW* __restrict__ w, float* logits, int k, float softcap,
                                                  float scaling, const float* __restrict__ bias,
                                                  float* __restrict__ weights, int* __restrict__ ids,
                                                  unsigned int* counter, int S = 0, int first = 0) {
  extern __shared__ unsigned long long rt_smem[];
  gemv_block<TX, TW, float, R, 0, VEC>(blk, E, K, split, x, w, logits, 0);
  if (!last_block(counter, nblk)) return;
  for (int t = 0; t < R; t++) {
    // From L2: this SM's L1 may hold stale lines of the logits.
    const float* row = logits + (long long)t * E;
    const long long at = (long long)t * (SH ? k + S : k);
    rt_select([&](int e) { return __ldcg(row + e); }, E, k, softcap, scaling, bias, rt_smem, (float*)(rt_smem + E),
              (int*)((float*)(rt_smem + E) + E), weights + at, ids + at);
    if constexpr (SH) {
      if ((int)threadIdx.x < S) {
        weights[at + k + threadIdx.x] = 1.f;
        ids[at + k + threadIdx.x] = first + (int)threadIdx.x;
      }
    }
  }
}

template <typename TX, typename TW, int R, int VEC>
__global__ void __launch_bounds__(256, 1) router_fused(int E, int K, int split, const TX* __restrict__ x,
                                                       const TW* __restrict__ w, float* logits, int k, float softcap,
                                                       float scaling, const float* __restrict__ bias,
                                                       float* __restrict__ weights, int* __restrict__ ids,
                                                       unsigned int* counter) {
  pdl_wait();
  router_fused_body<TX, TW, R, VEC>(blockIdx.x, gridDim.x, E, K, split, x, w, logits, k, softcap, scaling, bias, weights,
                                    ids, counter);
}

// router_fused_shared is router_fused writing each token's routes with its
// S shared experts (first ..) appended, weight 1: what moe_add_shared
// makes of router_fused's routes (lower.TopKShared), the same bits.
template <typename TX, typename TW, int R, int VEC>
__global__ void __launch_bounds__(256, 1) router_fused_shared(int E, int K, int split, const TX* __restrict__ x,
                                                              const TW* __restrict__ w, float* logits, int k, float softcap,
                                                              float scaling, const float* __restrict__ bias,
                                                              float* __restrict__ weights, int* __restrict__ ids,
                                                              unsigned int* counter, int S, int first) {
  pdl_wait();
  router_fused_body<TX, TW, R, VEC, true>(blockIdx.x, gridDim.x, E, K, split, x, w, logits, k, softcap, scaling, bias,
                                          weights, ids, counter, S, first);
}
