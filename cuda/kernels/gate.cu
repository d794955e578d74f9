// Laguna's attention output gate: out = x * softplus(g), softplus as torch's
// (beta 1, threshold 20: g itself above 20), in float32. x and out are
// [ntok, nh*d]; g is [ntok, G] with rows ldg apart (it may be the gate
// columns of a fused QKVG GEMM output): G == nh is one gate per head
// broadcast over its d channels, G == nh*d one gate per channel. out may
// alias x.
template <typename T>
__global__ void softplus_gate(int ntok, int nh, int d, int G, const T* x, const T* __restrict__ g,
                              long long ldg, T* out) {
  int row = nh * d;
  bool per_head = G == nh && G != row;  // d == 1 makes the two the same
  long long n = (long long)ntok * row;
  LAGC_FOR(i, n) {
    long long t = i / row;
    int c = (int)(i - t * row);
    float gv = to_f32(g[t * ldg + (per_head ? c / d : c)]);
    float sp = gv > 20.f ? gv : log1pf(expf(gv));
    out[i] = from_f32<T>(to_f32(x[i]) * sp);
  }
}
