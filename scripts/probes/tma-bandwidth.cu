// Run on the H200: nvcc -O3 -arch=sm_90a -o /tmp/tmabw scripts/probes/tma-bandwidth.cu -lcuda && /tmp/tmabw
// (docs/PERF.md, 2026-12-05 from 03:23 UTC). Not part of lagc; no Go code reads it.
// Read-bandwidth probe: TMA boxes of 64x256 bf16 (32 KB) from a weight
// stack, row-major (2D map, each box 256 rows x 128 B) against a
// tile-contiguous layout (4D map, each box one 32 KB run), with and
// without a pause per box standing for the MMAs; and a plain read.
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

struct __align__(64) Map { CUtensorMap m; };

__device__ __forceinline__ unsigned su32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

template <int ST>
__global__ void __launch_bounds__(32) probe(const __grid_constant__ Map map, int tiles, int nk, int tiled, long long pause, int pairs,
                                            unsigned long long* sink) {
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) unsigned long long bar[ST];
  unsigned char* smem = (unsigned char*)(((unsigned long long)raw + 1023) & ~1023ull);
  if (threadIdx.x != 0) return;
  for (int s = 0; s < ST; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(&bar[s])), "r"(1));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  int it = 0, issued = 0;
  // jobs: (tile, kb) in GEMM order, tile t = blockIdx.x + i*gridDim.x
  int myTiles = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) myTiles++;
  long long total = (long long)myTiles * nk;
  auto issue = [&](long long j) {
    int s = (int)(j % ST);
    int t = blockIdx.x + (int)(j / nk) * gridDim.x, kb = (int)(j % nk);
    unsigned dst = su32(smem + s * 32768), b = su32(&bar[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(32768) : "memory");
    if (tiled) {
      asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
                   "l"((unsigned long long)&map), "r"(0), "r"(0), "r"(kb), "r"(t), "r"(b) : "memory");
    } else {
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                   "l"((unsigned long long)&map), "r"(kb * 64), "r"(t * 256), "r"(b) : "memory");
    }
  };
  long long j = 0;
  for (; j < total && j < ST; j++) issue(j);
  unsigned long long acc = 0;
  for (long long w = 0; w < total; w++) {
    int s = (int)(w % ST);
    unsigned par = (unsigned)((w / ST) & 1), done = 0;
    do {
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(su32(&bar[s])), "r"(par) : "memory");
    } while (!done);
    acc += smem[s * 32768 + (w & 1023)];
    if (pause) { long long t0 = clock64(); while (clock64() - t0 < pause) {} }
    if (pairs == 0 || (w & 1)) {
      for (int q = 0; q < (pairs ? 2 : 1) && j < total; q++, j++) issue(j);
    }
  }
  if (acc == 12345) sink[0] = acc;
}

__global__ void plain(const uint4* p, long long n, unsigned long long* sink) {
  uint4 a = make_uint4(0, 0, 0, 0);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint4 v = __ldcs(p + i);
    a.x ^= v.x; a.y ^= v.y;
  }
  if (a.x == 12345 && a.y == 7) sink[0] = a.x;
}

#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char* s; cuGetErrorString(r, &s); printf("%s: %s\n", #x, s); exit(1); } } while (0)
#define RK(x) do { cudaError_t r = (x); if (r != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(r)); exit(1); } } while (0)

int main() {
  const int K = 3072, rowsPerTile = 256, tiles = 2056 + 1028;  // gate_up (257x2048 rows) + down-sized extra: 3084 tiles ~ 4.85 GB
  const int nk = K / 64;
  const long long rows = (long long)tiles * rowsPerTile;
  const size_t bytes = (size_t)rows * K * 2;
  void* d; RK(cudaMalloc(&d, bytes)); RK(cudaMemset(d, 1, bytes));
  unsigned long long* sink; RK(cudaMalloc(&sink, 8));
  Map m2, m4;
  {
    cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)K * 2};
    cuuint32_t box[2] = {64, 256}, es[2] = {1, 1};
    CK(cuTensorMapEncodeTiled(&m2.m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  }
  {
    cuuint64_t dims[4] = {64, 256, (cuuint64_t)nk, (cuuint64_t)tiles};
    cuuint64_t strides[3] = {128, 128 * 256, (cuuint64_t)128 * 256 * nk};
    cuuint32_t box[4] = {64, 256, 1, 1}, es[4] = {1, 1, 1, 1};
    CK(cuTensorMapEncodeTiled(&m4.m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, d, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  }
  const int smem = 4 * 32768 + 1024;
  RK(cudaFuncSetAttribute(probe<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768 + 1024));
  RK(cudaFuncSetAttribute(probe<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768 + 1024));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto timeit = [&](const char* name, auto launch) {
    std::vector<float> ms;
    for (int r = 0; r < 7; r++) {
      cudaEventRecord(e0); launch(); cudaEventRecord(e1); RK(cudaEventSynchronize(e1));
      float x; cudaEventElapsedTime(&x, e0, e1); ms.push_back(x);
    }
    RK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    printf("%-44s %8.1f us  %6.2f TB/s\n", name, ms[3] * 1e3, bytes / (ms[3] * 1e-3) / 1e12);
  };
  timeit("plain __ldcs read, 132x8 blocks x 512", [&] { plain<<<132 * 8, 512>>>((const uint4*)d, bytes / 16, sink); });
  for (int pauseNs : {0, 500, 700, 1000}) {
    long long pause = (long long)pauseNs * 198 / 100;  // ~1.98 GHz
    for (int tiled = 0; tiled < 2; tiled++) {
      for (int st : {4, 6}) for (int pr = 0; pr < 2; pr++) {
        if (tiled && pr) continue;
        char name[128];
        snprintf(name, sizeof name, "TMA %s ST=%d%s pause %d ns", tiled ? "tiled 32KB runs" : "row-major 256x128B", st, pr ? " pairs" : "", pauseNs);
        if (st == 4) timeit(name, [&] { probe<4><<<132, 32, 4 * 32768 + 1024>>>(tiled ? m4 : m2, tiles, nk, tiled, pause, pr, sink); });
        else timeit(name, [&] { probe<6><<<132, 32, 6 * 32768 + 1024>>>(tiled ? m4 : m2, tiles, nk, tiled, pause, pr, sink); });
      }
    }
  }
  return 0;
}
