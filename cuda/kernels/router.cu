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
// larger E or k.

// The sigmoid score of logit l, soft-capped first when softcap > 0.
template <typename T> __device__ __forceinline__ float rt_score(T logit, float softcap) {
  float l = to_f32(logit);
  if (softcap > 0.f) l = (float)tanh((double)(l / softcap)) * softcap;
  return (float)(1.0 / (1.0 + exp(-(double)l)));
}

// A warp per token, up to 4 tokens per block; PER = experts per lane, a
// power of two with 32*PER >= E.
template <typename T, int PER>
__global__ void __launch_bounds__(128) router_topk(int ntok, int E, int k, float softcap, float scaling,
                                                   const T* __restrict__ logits, long long ld,
                                                   const float* __restrict__ bias, float* __restrict__ weights,
                                                   int* __restrict__ ids) {
  pdl_wait();
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
  if (lane < k) {
    weights[(long long)t * k + lane] = s / sum * scaling;
    ids[(long long)t * k + lane] = mine;
  }
}

// A block per token (a thread per expert up to 1024, more each beyond), for
// E > 1024 or k > 32. A selection round is a register maximum over the
// thread's own experts, a warp maximum, and one __syncthreads for the
// warps' maxima, which every warp reduces itself (double-buffered, so the
// next round needs no second barrier).
//
// Dynamic shared memory: E 64-bit keys, E floats (s), k ints (chosen).
template <typename T>
__global__ void router_topk_block(int ntok, int E, int k, float softcap, float scaling, const T* __restrict__ logits,
                                  long long ld, const float* __restrict__ bias, float* __restrict__ weights,
                                  int* __restrict__ ids) {
  pdl_wait();
  extern __shared__ unsigned long long rt_smem[];
  __shared__ unsigned long long wbest[2][32];
  unsigned long long* key = rt_smem;  // [E]; 0: taken
  float* score = (float*)(key + E);   // [E]
  int* chosen = (int*)(score + E);    // [k]
  int t = blockIdx.x;
  if (t >= ntok) return;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;

  for (int e = tid; e < E; e += blockDim.x) {
    float s = rt_score(logits[t * ld + e], softcap);
    score[e] = s;
    key[e] = ord_key(ord_bits(bias != nullptr ? s + bias[e] : s), e);
  }
  // A thread reads and clears only its own experts' keys (e % blockDim.x ==
  // tid), so the rounds need no barrier for them.
  for (int j = 0; j < k; j++) {
    unsigned long long b = 0;
    for (int e = tid; e < E; e += blockDim.x) b = max_u64(b, key[e]);
    b = warp_max_u64(b);
    if (lane == 0) wbest[j & 1][warp] = b;
    __syncthreads();
    b = warp_max_u64(lane < nwarps ? wbest[j & 1][lane] : 0ull);
    int e = key_index(b);
    if (e % (int)blockDim.x == tid) key[e] = 0;
    if (tid == 0) chosen[j] = e;
  }

  // score[] was written before the first round's barrier; chosen[] by this
  // thread.
  if (tid == 0) {
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += score[chosen[j]];
    for (int j = 0; j < k; j++) {
      weights[(long long)t * k + j] = score[chosen[j]] / sum * scaling;
      ids[(long long)t * k + j] = chosen[j];
    }
  }
}
