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
