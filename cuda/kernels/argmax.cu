// argmax over each row of x [rows, V] (the logits): the index of the
// largest value, the first on ties, a NaN above every number (the first
// NaN wins), as exec/cpu.ArgMax and torch.argmax. The decode step writes it
// where the next step's embedding reads its token.
//
// A candidate is one 64-bit key (ord_key, prelude.cuh), so a plain
// unsigned maximum is the answer, in any order of reduction.
//
// argmax: grid (rows, parts); block p of a row takes its chunks of
// AM_CHUNK elements p, p+parts, ... and writes its best key to
// part[row*parts + p], or, with one part, the index to out[row].
// argmax_final then reduces each row's parts. Two launches and no counter
// or flag, so nothing carries over from one graph replay to the next.

#define AM_THREADS 256
#define AM_PER 4  // loads in flight per thread
#define AM_CHUNK (AM_THREADS * AM_PER)

// keep (a decode step's, one row): the row also goes to keep[(pos[0] & 1) *
// V + i], where the host reads it (StepLogits) while the next step, queued
// already, overwrites the logits (exec/gpu's decoding one step ahead).
template <typename T>
__global__ void __launch_bounds__(AM_THREADS) argmax(int rows, int V, const T* __restrict__ x,
                                                     unsigned long long* __restrict__ part, int* __restrict__ out,
                                                     float* __restrict__ keep, const int* __restrict__ pos) {
  pdl_wait();
  if (keep != nullptr) keep += (long long)(pos[0] & 1) * V;
  __shared__ unsigned long long wbest[AM_THREADS / 32];
  const int r = blockIdx.x, p = blockIdx.y, parts = gridDim.y;
  const T* xr = x + (long long)r * V;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned long long best = 0;  // below every key
  for (long long c = (long long)p * AM_CHUNK; c < V; c += (long long)parts * AM_CHUNK) {
    float v[AM_PER];
#pragma unroll
    for (int u = 0; u < AM_PER; u++) {
      const long long i = c + u * AM_THREADS + tid;
      v[u] = i < V ? to_f32(xr[i]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < AM_PER; u++) {
      const long long i = c + u * AM_THREADS + tid;
      if (i < V) {
        best = max_u64(best, ord_key(ord_bits(v[u]), (int)i));
        if (keep != nullptr) keep[i] = v[u];
      }
    }
  }
  best = warp_max_u64(best);
  if (lane == 0) wbest[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = warp_max_u64(lane < AM_THREADS / 32 ? wbest[lane] : 0ull);
    if (lane == 0) {
      if (parts == 1)
        out[r] = key_index(best);
      else
        part[(long long)r * parts + p] = best;
    }
  }
}

// A warp per row, up to 8 rows a block: the best of the row's parts.
__global__ void __launch_bounds__(AM_THREADS) argmax_final(int rows, int parts,
                                                           const unsigned long long* __restrict__ part,
                                                           int* __restrict__ out) {
  pdl_wait();
  const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (r >= rows) return;  // the whole warp
  unsigned long long best = 0;
  for (int p = lane; p < parts; p += 32) best = max_u64(best, part[(long long)r * parts + p]);
  best = warp_max_u64(best);
  if (lane == 0) out[r] = key_index(best);
}
