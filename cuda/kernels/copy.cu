// Copies of the split and concat ops.

// out[r*ldo + c] = in[r*ldi + c] for r < rows, c < cols: one piece of a
// split or concat along an inner axis.
template <typename T>
__global__ void copy_rows(long long rows, long long cols, const T* __restrict__ in, long long ldi,
                          T* __restrict__ out, long long ldo) {
  pdl_wait();
  LAGC_FOR(i, rows * cols) {
    long long r = i / cols, c = i - r * cols;
    out[r * ldo + c] = in[r * ldi + c];
  }
}

// l2_prefetch asks the L2 cache to fetch up to four ranges (p_i, n_i bytes;
// n_i 0: none) of read-only data, the next GEMVs' weights, while the
// latency-bound kernels after it run, which leave DRAM idle. It writes
// nothing and returns once its requests are issued. Each p_i 16-byte
// aligned; a tail under 16 bytes is left out.
__global__ void l2_prefetch(const unsigned char* p0, long long n0, const unsigned char* p1, long long n1,
                            const unsigned char* p2, long long n2, const unsigned char* p3, long long n3) {
  pdl_wait();
  const long long chunk = 16384;  // bytes a request
  const long long step = (long long)gridDim.x * blockDim.x * chunk;
  const long long first = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * chunk;
  const unsigned char* ps[4] = {p0, p1, p2, p3};
  const long long ns[4] = {n0, n1, n2, n3};
#pragma unroll
  for (int r = 0; r < 4; r++)
    for (long long off = first; off < ns[r]; off += step) {
      const unsigned n = (unsigned)(min(chunk, ns[r] - off) & ~15ll);
      if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ps[r] + off), "r"(n) : "memory");
    }
}
