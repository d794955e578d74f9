// Kernels of the CUDA layer's microbenchmarks (lagc cuda-bench): launch
// cost, copy bandwidth and a small kernel for NVRTC compile time.

// y = a*x + y
template <typename T>
__global__ void axpy(long long n, float a, const T* __restrict__ x, T* __restrict__ y) {
  pdl_wait();
  LAGC_FOR(i, n) { y[i] = from_f32<T>(a * to_f32(x[i]) + to_f32(y[i])); }
}

// Does nothing: measures launch cost.
extern "C" __global__ void noop() { pdl_wait(); }

// dst = src, 16 bytes per thread and step (n16 = bytes/16).
extern "C" __global__ void copy16(long long n16, const uint4* __restrict__ src, uint4* __restrict__ dst) {
  pdl_wait();
  LAGC_FOR(i, n16) { dst[i] = src[i]; }
}

// read_runs reads a [nrows, ld]-byte matrix as a grouped GEMM's producer
// reads its weights: a block takes groups of `rows` consecutive rows and,
// for each k-block of `run` bytes, that run of every row of the group (a
// TMA box's pattern: `run` bytes from each of `rows` rows ld apart, 128
// bytes for a 64-column bf16 box), 16 bytes a thread, 4 in flight; the
// XOR of what it read goes to *sink only when it is a value no input
// makes (so nothing is elided). How the bandwidth depends on `run` says
// whether longer runs a row a stage would feed the bf16 grouped GEMMs
// faster (lagc cuda-bench's read-runs rows). ld and run: multiples of 16.
extern "C" __global__ void read_runs(long long nrows, long long ld, int rows, int run, const uint4* __restrict__ src,
                                     unsigned* sink) {
  pdl_wait();
  const int per_row = run / 16, chunks = rows * per_row;
  const long long groups = nrows / rows, kblocks = ld / run, ld16 = ld / 16;
  unsigned acc = 0;
  for (long long g = blockIdx.x; g < groups; g += gridDim.x)
    for (long long kb = 0; kb < kblocks; kb++) {
      const uint4* base = src + g * rows * ld16 + kb * per_row;
#pragma unroll 4
      for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
        const int r = i / per_row, c = i - r * per_row;
        const uint4 v = __ldcs(base + r * ld16 + c);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    }
  if (acc == 0x9E3779B9u) *sink = acc;
}
