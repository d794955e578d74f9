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

// l2_prefetch asks the L2 cache to fetch `bytes` at p (read-only data: the
// next GEMV's weights) while the latency-bound kernels after it run, which
// leave DRAM idle. It writes nothing and returns once its requests are
// issued. p 16-byte aligned; a tail under 16 bytes is left out.
__global__ void l2_prefetch(const unsigned char* p, long long bytes) {
  pdl_wait();
  const long long chunk = 16384;  // bytes a request
  const long long step = (long long)gridDim.x * blockDim.x * chunk;
  for (long long off = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * chunk; off < bytes; off += step) {
    const unsigned n = (unsigned)(min(chunk, bytes - off) & ~15ll);
    if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
  }
}
