// The decode step's bookkeeping, the last launch of a captured decode step.

// After a decode step: its argmax becomes the next step's token and the
// position advances, on the device, so the next replay of the captured
// graph needs nothing from the host. With out (lower.BaseOut: pinned host
// memory the device writes to), the argmax and the bits of the logit it
// picked also go to out[2 * (p & 1)] and out[2 * (p & 1) + 1], p the step's
// position: a slot a step, which the host reads while the next step runs
// (exec/gpu's decoding one step ahead), telling it the token and whether
// the row held a NaN or an infinity (the argmax picks those first).
extern "C" __global__ void step_next(const int* __restrict__ next, int* __restrict__ tokens, int* __restrict__ pos,
                                     const float* __restrict__ logits, int V, int* out) {
  pdl_wait();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const int t = next[0], p = pos[0];
    tokens[0] = t;
    pos[0] = p + 1;
    if (out != nullptr) {
      int* o = out + 2 * (p & 1);
      o[0] = t;
      o[1] = t >= 0 && t < V ? __float_as_int(logits[t]) : 0x7fc00000;  // a quiet NaN: no logit to read
      __threadfence_system();  // in host memory before the step ends
    }
  }
}
