// MoE router: for each token's expert logits (float32 normally), optionally
// soft-capped (softcap > 0: c*tanh(l/c)), s = sigmoid(l); the top k experts
// by s + bias (bias only chooses; null: none) are chosen, best first, and
// weighted s / sum(chosen s) * scaling. One block per token.
//
// Exactly as exec/cpu.RouterTopK computes it, so the same experts are
// chosen: tanh and the sigmoid in double rounded once to float (as the
// reference does), ties to the lower expert index, NaN above every number,
// the sum in selection order.
//
// Each candidate is one 64-bit key, (order-preserving bits of s + bias) << 32
// | (0xffffffff - expert), so a plain unsigned maximum picks the best score
// and, among equal scores, the lower index; a taken expert's key is 0,
// below every candidate. A selection round is then a register maximum over
// the thread's own experts (one, for E <= blockDim), a warp maximum with
// shuffles, and one __syncthreads for the warps' maxima, which every warp
// reduces itself (double-buffered, so the next round needs no second
// barrier). The previous kernel (a serial scan by thread 0 and two
// barriers per round) spent most of its time in barriers and that scan.
//
// Dynamic shared memory: E 64-bit keys, E floats (s), k ints (chosen).

// rt_ord maps a float to unsigned bits in the float order; every NaN maps
// above +inf, and -0 to +0 (they compare equal as floats).
__device__ __forceinline__ unsigned int rt_ord(float x) {
  if (x != x) return 0xffffffffu;
  unsigned int u = x == 0.f ? 0u : __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long rt_max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// A 64-bit warp maximum from two 32-bit shuffles per step.
__device__ __forceinline__ unsigned long long rt_warp_max(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    unsigned int lo = (unsigned int)__shfl_xor_sync(0xffffffffu, (int)(unsigned int)v, o);
    unsigned int hi = (unsigned int)__shfl_xor_sync(0xffffffffu, (int)(unsigned int)(v >> 32), o);
    v = rt_max(v, ((unsigned long long)hi << 32) | lo);
  }
  return v;
}

template <typename T>
__global__ void router_topk(int ntok, int E, int k, float softcap, float scaling, const T* __restrict__ logits,
                            long long ld, const float* __restrict__ bias, float* __restrict__ weights,
                            int* __restrict__ ids) {
  extern __shared__ unsigned long long rt_smem[];
  __shared__ unsigned long long wbest[2][32];
  unsigned long long* key = rt_smem;  // [E]
  float* score = (float*)(key + E);   // [E]
  int* chosen = (int*)(score + E);    // [k]
  int t = blockIdx.x;
  if (t >= ntok) return;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;

  for (int e = tid; e < E; e += blockDim.x) {
    float l = to_f32(logits[t * ld + e]);
    if (softcap > 0.f) l = (float)tanh((double)(l / softcap)) * softcap;
    float s = (float)(1.0 / (1.0 + exp(-(double)l)));
    score[e] = s;
    float sel = bias != nullptr ? s + bias[e] : s;
    key[e] = ((unsigned long long)rt_ord(sel) << 32) | (0xffffffffu - (unsigned int)e);
  }
  // A thread reads and clears only its own experts' keys (e % blockDim.x ==
  // tid), so the rounds need no barrier for them.
  for (int j = 0; j < k; j++) {
    unsigned long long b = 0;
    for (int e = tid; e < E; e += blockDim.x) b = rt_max(b, key[e]);
    b = rt_warp_max(b);
    if (lane == 0) wbest[j & 1][warp] = b;
    __syncthreads();
    b = rt_warp_max(lane < nwarps ? wbest[j & 1][lane] : 0ull);
    int e = (int)(0xffffffffu - (unsigned int)b);
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
