// embedding: out[t, :] = table[tokens[t], :] for t < ntok.
// The token ids are read from device memory (where the previous decode
// step's argmax wrote them), so one captured graph serves every step.
// A kernel cannot return an error: a token outside [0, V) (which the host
// checks for prompt ids) gets a NaN row, so it shows in the logits instead
// of reading out of bounds.
// Grid: (ceil(H / blockDim.x) capped, ntok); a grid-stride loop over H.
template <typename T>
__global__ void embedding(int ntok, int H, int V, const int* __restrict__ tokens,
                          const T* __restrict__ table, T* __restrict__ out) {
  pdl_wait();
  int t = blockIdx.y;
  if (t >= ntok) return;
  int id = tokens[t];
  bool ok = id >= 0 && id < V;
  const T* row = table + (long long)(ok ? id : 0) * H;
  T* o = out + (long long)t * H;
  T nan = from_f32<T>(__int_as_float(0x7fc00000));
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < H; c += gridDim.x * blockDim.x) {
    o[c] = ok ? row[c] : nan;
  }
}
