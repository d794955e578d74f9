// A toy decode step for CUDA-graph tests: everything that changes between
// steps (the position) lives in device memory, so one captured graph serves
// every step.

// y[i] = 2*x[i] + pos
extern "C" __global__ void step_add_pos(int n, const int* __restrict__ pos, const float* __restrict__ x, float* __restrict__ y) {
  int p = *pos;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = 2.f * x[i] + (float)p;
}

// log[pos] = sum(y); one block of 256 threads.
extern "C" __global__ void step_log_sum(int n, const int* __restrict__ pos, const float* __restrict__ y, float* __restrict__ out_log) {
  __shared__ float s[256];
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += y[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out_log[*pos] = s[0];
}

// pos += 1, after the step's readers: the next replay sees the next position.
extern "C" __global__ void step_advance(int* pos) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *pos += 1;
}

// Writes far outside any allocation: the illegal-address test's kernel.
extern "C" __global__ void wild_write(float* p) { p[(1ll << 40) / 4] = 1.f; }
