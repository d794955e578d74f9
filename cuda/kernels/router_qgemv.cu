// router_qgemv: a decode MoE layer's router (router.cu's router_fused) and
// a quantised GEMV that does not depend on it (quant.cu's qgemv: the shared
// expert's gate+up) in one launch. Its first rblocks blocks are
// router_fused's blocks, the rest qgemv's, each running the code of the
// launch it replaces on the same block index (the same bits), so the GEMV
// runs while the router's last block selects the experts (one SM for a few
// microseconds) instead of after it. Compiled after matmul.cu, router.cu,
// norm.cu and quant.cu (exec/gpu's sourceDeps). Dynamic shared memory:
// router_fused's (qgemv has none). Launch bounds (256, 3): S-2.1's 256 +
// 128 blocks fit the GPU at once with three a multiprocessor (at (256, 1)
// ptxas took 86 registers, two blocks a multiprocessor).
template <typename TX, typename TW, typename TY, int R, int VEC, int QT, int QR, int SWIGLU, int NW, int SPLIT>
__global__ void __launch_bounds__(256, LAGC_MINB(3)) router_qgemv(int rblocks, int E, int K, int split, const TX* __restrict__ x,
                                                       const TW* __restrict__ w, float* logits, int k, float softcap,
                                                       float scaling, const float* __restrict__ bias,
                                                       float* __restrict__ weights, int* __restrict__ ids,
                                                       unsigned int* counter, int qn, int qk, long long qrows, long long qrow0,
                                                       const unsigned char* __restrict__ qw, const signed char* __restrict__ xq,
                                                       const float4* __restrict__ xs, TY* __restrict__ qy, int qacc) {
  pdl_wait();
  if ((int)blockIdx.x < rblocks)
    router_fused_body<TX, TW, R, VEC>(blockIdx.x, rblocks, E, K, split, x, w, logits, k, softcap, scaling, bias, weights,
                                      ids, counter);
  else
    qgemv_rows<TY, QT, QR, SWIGLU, NW, SPLIT>(blockIdx.x - rblocks, qn, qk, qrows, qrow0, qw, QX{xq, xs, qk}, qy, qacc);
}
