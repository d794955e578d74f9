// argmax over each row of x [rows, V] (the logits): the index of the
// largest value, the first on ties, a NaN above every number (the first
// NaN wins), as exec/cpu.ArgMax and torch.argmax. The decode step writes it
// where the next step's embedding reads its token. One block per row.

__device__ __forceinline__ bool am_better(float a, int ia, float b, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  bool an = a != a, bn = b != b;
  if (an || bn) {
    if (an && bn) return ia < ib;
    return an;
  }
  if (a != b) return a > b;
  return ia < ib;
}

template <typename T>
__global__ void argmax(int rows, int V, const T* __restrict__ x, int* __restrict__ out) {
  __shared__ float wv[32];
  __shared__ int wi[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const T* xr = x + (long long)r * V;
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  float bv = 0.f;
  int bi = -1;
  for (int i = tid; i < V; i += blockDim.x) {
    float v = to_f32(xr[i]);
    if (am_better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (am_better(ov, oi, bv, bi)) {
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
    for (int w = 1; w < nwarps; w++) {
      if (am_better(wv[w], wi[w], bv, bi)) {
        bv = wv[w];
        bi = wi[w];
      }
    }
    out[r] = bi;
  }
}
