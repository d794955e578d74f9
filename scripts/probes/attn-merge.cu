// Run on the GPU machine: nvcc -O3 -arch=sm_90a -o /tmp/am scripts/probes/attn-merge.cu && /tmp/am
// Not part of lagc; no Go code reads it (docs/PERF.md says what it found).
//
// Does a split decode attention's merge cost less through a thread-block
// cluster's shared memory than through global memory and a counter?
// attn_decode (cuda/kernels/attention.cu) at S-2.1's decode shape: 8 kv
// heads, 9 query heads a group (a warp each), head_dim 128, 512 keys over
// NSPLIT blocks a kv head. Each block scores its keys (a tile of 32 through
// shared memory, as dec_tile does), then:
//   global:  writes its partials (acc, max, sum), fences, counts itself on
//            its kv head's counter; the last block merges from L2
//            (attn_decode's last_block + dec_merge);
//   cluster: the NSPLIT blocks of a kv head are one cluster; each keeps its
//            partials in shared memory, a cluster barrier, and rank 0's
//            warps merge them with ld.shared::cluster, then a second barrier
//            (the others' shared memory must outlive rank 0's reads).
// Timed as a CUDA graph of 96 launches (48 layers' worth x 2), each reading
// a fresh slice of a 512 MB cache so keys come from HBM as in decode, with
// programmatic launch so one launch's blocks start as the last one's end.
// Prints us a launch, medians of 7 replays, and the two outputs' largest
// difference (the merge order is the same, so 0 expected).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

typedef unsigned short bf16;
__device__ __forceinline__ float bf2f(bf16 x) { return __uint_as_float((unsigned)x << 16); }
static bf16 f2bf(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return (bf16)(u >> 16);
}

constexpr int NKV = 8, G = 9, D = 128, KEYS = 512, TILE = 32;
constexpr int NTHR = 32 * G;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ unsigned cl_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cl_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned mapa(unsigned sa, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(sa), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_cl(unsigned a) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_cl4(unsigned a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// CLUSTER 0: the global merge; else the cluster's.
template <int CLUSTER>
__global__ void __launch_bounds__(NTHR, 1) attn(int nsplit, const bf16* __restrict__ kc, const bf16* __restrict__ vc,
                                                long long slice, const float* __restrict__ q, float* part_acc, float* part_ml,
                                                unsigned* counters, float* out) {
  pdl_wait();
  extern __shared__ __align__(16) float sm[];
  float* qs = sm;                         // [G][D]
  bf16* Ks = (bf16*)(qs + G * D);  // [TILE][D + 8]
  bf16* Vs = Ks + TILE * (D + 8);            // [TILE][D]
  float* pacc = (float*)(Vs + TILE * D);              // [G][D] this block's partials
  float* pml = pacc + G * D;                          // [G][2]
  const int split = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int head = kvh * G + warp;
  for (int c = lane; c < D; c += 32) qs[warp * D + c] = q[head * D + c];
  const int per = KEYS / nsplit, j0 = split * per;
  kc += slice;
  vc += slice;
  float m = -INFINITY, l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int jt = j0; jt < j0 + per; jt += TILE) {
    __syncthreads();
    for (int i = tid; i < TILE * D / 8; i += NTHR) {
      const int kk = i / (D / 8), ch = (i % (D / 8)) * 8;
      const long long off = ((long long)(jt + kk) * NKV + kvh) * D + ch;
      *(uint4*)(Ks + kk * (D + 8) + ch) = *(const uint4*)(kc + off);
      *(uint4*)(Vs + kk * D + ch) = *(const uint4*)(vc + off);
    }
    __syncthreads();
    float s = 0.f;
    for (int c = 0; c < D; c++) s += qs[warp * D + c] * bf2f(Ks[lane * (D + 8) + c]);
    s *= 0.088388f;
    const float mn = fmaxf(m, warp_max(s));
    const float p = expf(s - mn), f = expf(m - mn);
    l = l * f + warp_sum(p);
    for (int e = 0; e < 4; e++) acc[e] *= f;
    for (int j = 0; j < TILE; j++) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      for (int e = 0; e < 4; e++) acc[e] += pj * bf2f(Vs[j * D + 4 * lane + e]);
    }
    m = mn;
  }
  float o[4];
  if (CLUSTER == 0) {
    const long long ph = (long long)split * NKV * G + head;
    *(float4*)(part_acc + ph * D + 4 * lane) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    if (lane == 0) {
      part_ml[ph * 2] = m;
      part_ml[ph * 2 + 1] = l;
    }
    __shared__ bool last;
    __syncthreads();
    if (tid == 0) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      const bool lb = atomicAdd(counters + kvh, 1u) == (unsigned)nsplit - 1;
      if (lb) {
        counters[kvh] = 0u;
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      }
      last = lb;
    }
    __syncthreads();
    if (!last) return;
    float M = -INFINITY, den = 0.f, ms = 0.f, ls = 0.f;
    if (lane < nsplit) {
      ms = __ldcg(part_ml + ((long long)lane * NKV * G + head) * 2);
      ls = __ldcg(part_ml + ((long long)lane * NKV * G + head) * 2 + 1);
      if (ls > 0.f) M = ms;
    }
    M = warp_max(M);
    den = warp_sum(lane < nsplit && ls > 0.f ? expf(ms - M) * ls : 0.f);
    const float wl = lane < nsplit && ls > 0.f ? expf(ms - M) : 0.f;
    float num[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < nsplit; s++) {
      const float w = __shfl_sync(0xffffffffu, wl, s);
      const float4 a = __ldcg((const float4*)(part_acc + ((long long)s * NKV * G + head) * D + 4 * lane));
      num[0] += w * a.x, num[1] += w * a.y, num[2] += w * a.z, num[3] += w * a.w;
    }
    for (int e = 0; e < 4; e++) o[e] = num[e] / den;
  } else {
    *(float4*)(pacc + warp * D + 4 * lane) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    if (lane == 0) {
      pml[warp * 2] = m;
      pml[warp * 2 + 1] = l;
    }
    cl_sync();
    const bool r0 = cl_rank() == 0;
    if (r0) {
      const unsigned am = (unsigned)__cvta_generic_to_shared(pml + warp * 2);
      const unsigned aa = (unsigned)__cvta_generic_to_shared(pacc + warp * D + 4 * lane);
      float M = -INFINITY, den = 0.f, ms = 0.f, ls = 0.f;
      if (lane < nsplit) {
        const unsigned a = mapa(am, lane);
        ms = ld_cl(a);
        ls = ld_cl(a + 4);
        if (ls > 0.f) M = ms;
      }
      M = warp_max(M);
      den = warp_sum(lane < nsplit && ls > 0.f ? expf(ms - M) * ls : 0.f);
      const float wl = lane < nsplit && ls > 0.f ? expf(ms - M) : 0.f;
      float num[4] = {0.f, 0.f, 0.f, 0.f};
      for (int s = 0; s < nsplit; s++) {
        const float w = __shfl_sync(0xffffffffu, wl, s);
        const float4 a = ld_cl4(mapa(aa, s));
        num[0] += w * a.x, num[1] += w * a.y, num[2] += w * a.z, num[3] += w * a.w;
      }
      for (int e = 0; e < 4; e++) o[e] = num[e] / den;
    }
    cl_sync();  // rank 0's reads are done before any block's shared memory goes
    if (!r0) return;
  }
  *(float4*)(out + head * D + 4 * lane) = make_float4(o[0], o[1], o[2], o[3]);
}

int main(int argc, char** argv) {
  const int launches = 96, reps = 7;
  const long long cacheElems = 256ll << 20;  // 512 MB of bf16, K and V halves
  const long long sliceElems = (long long)KEYS * NKV * D;
  bf16 *kc, *vc;
  CK(cudaMalloc(&kc, cacheElems * 2));
  CK(cudaMalloc(&vc, cacheElems * 2));
  {
    std::vector<bf16> h(cacheElems);
    srand(1);
    for (auto& x : h) x = f2bf((rand() % 2001 - 1000) / 1000.f);
    CK(cudaMemcpy(kc, h.data(), cacheElems * 2, cudaMemcpyHostToDevice));
    for (auto& x : h) x = f2bf((rand() % 2001 - 1000) / 1000.f);
    CK(cudaMemcpy(vc, h.data(), cacheElems * 2, cudaMemcpyHostToDevice));
  }
  float *q, *pacc, *pml, *out0, *out1;
  unsigned* cnt;
  CK(cudaMalloc(&q, NKV * G * D * 4));
  CK(cudaMalloc(&pacc, 32 * NKV * G * D * 4));
  CK(cudaMalloc(&pml, 32 * NKV * G * 2 * 4));
  CK(cudaMalloc(&out0, NKV * G * D * 4));
  CK(cudaMalloc(&out1, NKV * G * D * 4));
  CK(cudaMalloc(&cnt, NKV * 4));
  CK(cudaMemset(cnt, 0, NKV * 4));
  {
    std::vector<float> h(NKV * G * D);
    for (auto& x : h) x = (rand() % 2001 - 1000) / 1000.f;
    CK(cudaMemcpy(q, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  const size_t smem = (G * D + G * D + G * 2) * 4 + TILE * (D + 8) * 2 + TILE * D * 2;
  // 1 block an SM, as attn_decode (128 registers x 288 threads).
  const size_t smemPad = 120 * 1024;
  CK(cudaFuncSetAttribute(attn<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smemPad));
  CK(cudaFuncSetAttribute(attn<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smemPad));
  CK(cudaFuncSetAttribute(attn<1>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  (void)smem;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  auto launch = [&](int mode, int nsplit, int i, float* out) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(nsplit, NKV, 1);
    cfg.blockDim = dim3(NTHR, 1, 1);
    cfg.dynamicSmemBytes = smemPad;
    cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    at[1].id = cudaLaunchAttributeClusterDimension;
    at[1].val.clusterDim.x = nsplit;
    at[1].val.clusterDim.y = 1;
    at[1].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = mode ? 2 : 1;
    const long long slice = (long long)(i % (int)(cacheElems / sliceElems)) * sliceElems;
    if (mode)
      CK(cudaLaunchKernelEx(&cfg, attn<1>, nsplit, (const bf16*)kc, (const bf16*)vc, slice, (const float*)q, pacc, pml, cnt, out));
    else
      CK(cudaLaunchKernelEx(&cfg, attn<0>, nsplit, (const bf16*)kc, (const bf16*)vc, slice, (const float*)q, pacc, pml, cnt, out));
  };
  for (int cl : {8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cl, NKV, 1);
    cfg.blockDim = dim3(NTHR, 1, 1);
    cfg.dynamicSmemBytes = smemPad;
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = cl;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    int n = 0;
    CK(cudaOccupancyMaxActiveClusters(&n, attn<1>, &cfg));
    printf("clusters of %d blocks (1 an SM) resident at once: %d (the launch needs %d)\n", cl, n, NKV);
  }
  struct Cfg {
    const char* name;
    int mode, nsplit;
  } cfgs[] = {{"global, 16 splits", 0, 16}, {"cluster, 16 splits", 1, 16}, {"global, 8 splits", 0, 8}, {"cluster, 8 splits", 1, 8}};
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (auto& c : cfgs) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < launches; i++) launch(c.mode, c.nsplit, i, c.mode ? out1 : out0);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
      CK(cudaEventRecord(e0, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms * 1000.f / launches);
    }
    std::sort(t.begin(), t.end());
    printf("%-20s %7.2f us a launch (min %.2f, max %.2f)\n", c.name, t[reps / 2], t[0], t[reps - 1]);
    if (c.mode) {
      std::vector<float> a(NKV * G * D), b(NKV * G * D);
      CK(cudaMemcpy(a.data(), out0, a.size() * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), out1, b.size() * 4, cudaMemcpyDeviceToHost));
      float md = 0.f;
      for (size_t i = 0; i < a.size(); i++) md = std::max(md, std::abs(a[i] - b[i]));
      printf("  largest difference from the global merge's output (same splits): %g\n", md);
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  return 0;
}
