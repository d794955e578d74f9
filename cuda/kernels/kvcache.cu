// KV cache writes. Layout (one layer): two buffers K and V, each
// [slots, nkv, d] of T, row-major. A full-attention layer's cache is linear
// (window == 0): position p lives in slot p, slots = the context length. A
// sliding layer's is a ring of window slots: position p lives in slot
// p % window, which is exactly what its queries can see (p-window < j <= p).
//
// The source k, v are token rows ld elements apart (so they can be the k
// and v columns of a fused QKV GEMM output), nkv*d values each. Positions
// come from device memory, pos[t] for token t.

template <typename T>
__device__ __forceinline__ void kv_store_token(int t, int nkv, int d, int window, int slots,
                                               const int* __restrict__ pos, const T* __restrict__ k,
                                               const T* __restrict__ v, long long ldk, long long ldv,
                                               T* __restrict__ kc, T* __restrict__ vc) {
  int p = pos[t];
  if (p < 0) return;
  int slot = window > 0 ? p % window : p;
  if (slot >= slots) return;  // past the context: the host refuses such steps
  int row = nkv * d;
  long long dst = (long long)slot * row;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row; i += gridDim.x * blockDim.x) {
    kc[dst + i] = k[t * ldk + i];
    vc[dst + i] = v[t * ldv + i];
  }
}

// kv_append writes every token of the launch. For a ring the launch must
// not hold more than window tokens (two tokens would race for one slot):
// the decode step appends one, before attention reads the cache.
// Grid: (ceil(nkv*d / blockDim.x), ntok).
template <typename T>
__global__ void kv_append(int ntok, int nkv, int d, int window, int slots, const int* __restrict__ pos,
                          const T* __restrict__ k, const T* __restrict__ v, long long ldk, long long ldv,
                          T* __restrict__ kc, T* __restrict__ vc) {
  pdl_wait();
  int t = blockIdx.y;
  if (t >= ntok) return;
  kv_store_token(t, nkv, d, window, slots, pos, k, v, ldk, ldv, kc, vc);
}

// kv_compact_ring: after a prefill chunk's attention has read the chunk's
// keys linearly (from k and v themselves), the last min(ntok, window) of
// them move into the ring; earlier ones can never be seen again. Run it
// after the chunk's attention, which still reads the ring's older keys.
// Grid: (ceil(nkv*d / blockDim.x), min(ntok, window)).
template <typename T>
__global__ void kv_compact_ring(int ntok, int nkv, int d, int window, const int* __restrict__ pos,
                                const T* __restrict__ k, const T* __restrict__ v, long long ldk, long long ldv,
                                T* __restrict__ kc, T* __restrict__ vc) {
  pdl_wait();
  int keep = ntok < window ? ntok : window;
  if ((int)blockIdx.y >= keep) return;
  int t = ntok - keep + blockIdx.y;
  kv_store_token(t, nkv, d, window, window, pos, k, v, ldk, ldv, kc, vc);
}
