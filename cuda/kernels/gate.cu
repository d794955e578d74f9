// Laguna's attention output gate: out = x * softplus(g), softplus as torch's
// (beta 1, threshold 20: g itself above 20), in float32. x and out are
// [ntok, nh*d]; g is [ntok, G] with rows ldg elements apart (it may be the
// gate columns of a fused QKVG GEMM output): G == nh is one gate per head
// broadcast over its d channels, G == nh*d one gate per channel. out may
// alias x. The attention kernels (attention.cu, attention_prefill_tc.cu)
// apply the same gate as they write their output (attention_gate).

__device__ __forceinline__ float lagc_softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// gate_of is softplus of the gate of head h, channel c, in a token's gate
// row g (G == nh: per head, else per element); 1 without a gate (g null).
template <typename T>
__device__ __forceinline__ float gate_of(const T* g, int nh, int d, int G, int h, int c) {
  if (!g) return 1.f;
  bool per_head = G == nh && G != nh * d;  // d == 1 makes the two the same
  return lagc_softplus(to_f32(g[per_head ? h : h * d + c]));
}

template <typename T>
__global__ void softplus_gate(int ntok, int nh, int d, int G, const T* x, const T* __restrict__ g,
                              long long ldg, T* out) {
  pdl_wait();
  int row = nh * d;
  long long n = (long long)ntok * row;
  LAGC_FOR(i, n) {
    long long t = i / row;
    int c = (int)(i - t * row);
    out[i] = from_f32<T>(to_f32(x[i]) * gate_of(g + t * ldg, nh, d, G, c / d, c % d));
  }
}
