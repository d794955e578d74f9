// out[r] = sum of row r of x[rows, cols]; one block per row, a float
// accumulator per thread, then a tree in dynamic shared memory of
// blockDim.x floats.
template <typename T>
__global__ void row_sum(int rows, int cols, const T* __restrict__ x, float* __restrict__ out) {
  extern __shared__ float partial[];
  int r = blockIdx.x;
  if (r >= rows) return;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += to_f32(x[(long long)r * cols + c]);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = partial[0];
}
