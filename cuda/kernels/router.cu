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
// Dynamic shared memory: 2*E floats (score, selection key), k ints,
// E bytes (taken flags).

// greater orders floats with NaN above every number and equal to itself.
__device__ __forceinline__ bool rt_greater(float a, float b) {
  if (a != a) return b == b;
  return a > b;
}

// better: does candidate (a, ia) beat (b, ib)? ib < 0 is no candidate.
__device__ __forceinline__ bool rt_better(float a, int ia, float b, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (rt_greater(a, b)) return true;
  if (rt_greater(b, a)) return false;
  return ia < ib;
}

template <typename T>
__global__ void router_topk(int ntok, int E, int k, float softcap, float scaling, const T* __restrict__ logits,
                            long long ld, const float* __restrict__ bias, float* __restrict__ weights,
                            int* __restrict__ ids) {
  extern __shared__ float rt_smem[];
  __shared__ float wv[32];
  __shared__ int wi[32];
  float* score = rt_smem;
  float* sel = score + E;
  int* chosen = (int*)(sel + E);
  unsigned char* taken = (unsigned char*)(chosen + k);
  int t = blockIdx.x;
  if (t >= ntok) return;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;

  for (int e = tid; e < E; e += blockDim.x) {
    float l = to_f32(logits[t * ld + e]);
    if (softcap > 0.f) l = (float)tanh((double)(l / softcap)) * softcap;
    float s = (float)(1.0 / (1.0 + exp(-(double)l)));
    score[e] = s;
    sel[e] = bias != nullptr ? s + bias[e] : s;
    taken[e] = 0;
  }
  __syncthreads();

  for (int j = 0; j < k; j++) {
    float bv = 0.f;
    int bi = -1;
    for (int e = tid; e < E; e += blockDim.x) {
      if (!taken[e] && rt_better(sel[e], e, bv, bi)) {
        bv = sel[e];
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (rt_better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      wv[warp] = bv;
      wi[warp] = bi;
    }
    __syncthreads();
    if (tid == 0) {
      float v = wv[0];
      int i = wi[0];
      for (int w = 1; w < nwarps; w++) {
        if (rt_better(wv[w], wi[w], v, i)) {
          v = wv[w];
          i = wi[w];
        }
      }
      chosen[j] = i;
      taken[i] = 1;
    }
    __syncthreads();
  }

  if (tid == 0) {
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += score[chosen[j]];
    for (int j = 0; j < k; j++) {
      weights[(long long)t * k + j] = score[chosen[j]] / sum * scaling;
      ids[(long long)t * k + j] = chosen[j];
    }
  }
}
