// The decode step's bookkeeping, the last launch of a captured decode step.

// After a decode step: its argmax becomes the next step's token and the
// position advances, on the device, so the next replay of the captured
// graph needs nothing from the host.
extern "C" __global__ void step_next(const int* __restrict__ next, int* __restrict__ tokens, int* __restrict__ pos) {
  pdl_wait();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    tokens[0] = next[0];
    pos[0] += 1;
  }
}
