// gemm_wgmma: y [M, N] = x [M, K] w [N, K]^T on Hopper (sm_90a), bf16
// inputs and f32 accumulation. Both operands are K-major (activations
// row-major, weights in HF layout), the layout wgmma reads from shared
// memory without transposition.
//
// A persistent CTA of three warpgroups walks output tiles of 128 x BN:
//   producer   one thread issues TMA bulk tensor copies (x and w tiles of
//              64 columns, 128-byte swizzled) into a ring of STAGES shared
//              memory stages; `full` mbarriers count the bytes landing,
//              `empty` mbarriers count the consumers done with a stage
//   consumers  two warpgroups, 64 rows each, run wgmma m64nBNk16 on the
//              stage (descriptors into the swizzled tiles), one k-block of
//              MMAs kept in flight, then the epilogue from registers
//              (cooperative); or, at BN 128 (PP), each all 128 rows of
//              every other tile, one's epilogue beside the other's MMAs
//              (ping-pong)
// Registers move from the producer to the consumers with setmaxnreg. The
// epilogue stores whole 16-byte chunks where y's rows allow (quad_xpose).
// Dense: tiles of a column band are consecutive (t % tilesM): a weight
// tile is read from memory once and reused from L2 by the other row tiles.
// Grouped: the bands of a row tile are consecutive instead (its rows are
// one expert's, its weights no other row tile's but that expert's): the
// row tile is read from memory once and reused from L2 by all its bands,
// where band-major order streamed every row tile again for each band.
// TMA zero-fills reads past M, N and K, so ragged shapes need no masks but
// the epilogue's. Epilogues: 0 store, 1 accumulate (y += x w^T: residual
// folding), 2 SwiGLU (w rows [0, up_row) are gate rows, [up_row, ...) up
// rows; a tile loads BN/2 of each and writes silu(gate) * up).
//
// GROUPED (the routed experts of a prefill): x is the routes' rows grouped
// by expert and the row tiles come from moe_schedule's table, written on
// the device (tiles[i] = {expert e, first row, rows}, ntiles[0] of them):
// tile i reads weight rows from e * expert_rows (gate and up: up_row +
// e * expert_rows) and writes only its own rows; moe_gather_rows copies
// the routes' x rows into that order first. (A form gathering the rows
// itself, GROUPED 2, and a 2-CTA multicast one, GROUPED 3, measured no
// faster and were removed: docs/PERF.md.)

struct __align__(64) TmaMap {
  unsigned long long v[16];
};

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaMap* map, int c0, int c1, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// A shared-memory matrix descriptor for a K-major tile with the 128-byte
// swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart.
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator accesses across the fences.
template <int R> __device__ __forceinline__ void wg_pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Narrower token tiles of the quantised grouped GEMM (gemm_wgmma_q): an
// expert of a 2048-token prefill chunk has about 80 tokens.
__device__ __forceinline__ void wgmma_m64n64(float (&d)[32], unsigned long long da, unsigned long long db, int accum) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(accum));
}

__device__ __forceinline__ void wgmma_m64n96(float (&d)[48], unsigned long long da, unsigned long long db, int accum) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(da), "l"(db), "r"(accum));
}

__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], unsigned long long da, unsigned long long db, int accum) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accum));
}

__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], unsigned long long da, unsigned long long db, int accum) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(accum));
}

template <int BN> __device__ __forceinline__ void wgmma_bn(float (&d)[BN / 2], unsigned long long da, unsigned long long db,
                                                          int accum) {
  if constexpr (BN == 64)
    wgmma_m64n64(d, da, db, accum);
  else if constexpr (BN == 96)
    wgmma_m64n96(d, da, db, accum);
  else if constexpr (BN == 128)
    wgmma_m64n128(d, da, db, accum);
  else
    wgmma_m64n256(d, da, db, accum);
}

// wgmma with A from registers (4 a thread: bf16 or f16 pairs, the mma.sync A
// fragment of each warp's 16 rows) and B a K-major descriptor: the
// quantised grouped GEMM's weights dequantised in registers (QA::RS).
// Every N a multiple of 8 up to 128 (the token tile's rows rounded up: an
// MMA's time grows with N); scripts/gen-wgmma-rs.py writes them.
#define WGMMA_RS_M64N8(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32." T "." T " {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n8(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N8("f16");
  else
    WGMMA_RS_M64N8("bf16");
}
#undef WGMMA_RS_M64N8
#define WGMMA_RS_M64N16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n16k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n16(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N16("f16");
  else
    WGMMA_RS_M64N16("bf16");
}
#undef WGMMA_RS_M64N16
#define WGMMA_RS_M64N24(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n24k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, %16, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n24(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N24("f16");
  else
    WGMMA_RS_M64N24("bf16");
}
#undef WGMMA_RS_M64N24
#define WGMMA_RS_M64N32(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n32(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N32("f16");
  else
    WGMMA_RS_M64N32("bf16");
}
#undef WGMMA_RS_M64N32
#define WGMMA_RS_M64N40(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %25, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n40k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19}, {%20, %21, %22, %23}, %24, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n40(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N40("f16");
  else
    WGMMA_RS_M64N40("bf16");
}
#undef WGMMA_RS_M64N40
#define WGMMA_RS_M64N48(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n48k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, %27}, %28, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n48(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N48("f16");
  else
    WGMMA_RS_M64N48("bf16");
}
#undef WGMMA_RS_M64N48
#define WGMMA_RS_M64N56(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %33, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n56k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27}, {%28, %29, %30, %31}, %32, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n56(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N56("f16");
  else
    WGMMA_RS_M64N56("bf16");
}
#undef WGMMA_RS_M64N56
#define WGMMA_RS_M64N64(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n64(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N64("f16");
  else
    WGMMA_RS_M64N64("bf16");
}
#undef WGMMA_RS_M64N64
#define WGMMA_RS_M64N72(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %41, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n72k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}, {%36, %37, %38, %39}, %40, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n72(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N72("f16");
  else
    WGMMA_RS_M64N72("bf16");
}
#undef WGMMA_RS_M64N72
#define WGMMA_RS_M64N80(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %45, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, {%40, %41, %42, %43}, %44, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n80(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N80("f16");
  else
    WGMMA_RS_M64N80("bf16");
}
#undef WGMMA_RS_M64N80
#define WGMMA_RS_M64N88(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %49, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n88k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43}, {%44, %45, %46, %47}, %48, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n88(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N88("f16");
  else
    WGMMA_RS_M64N88("bf16");
}
#undef WGMMA_RS_M64N88
#define WGMMA_RS_M64N96(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n96k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, %52, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n96(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N96("f16");
  else
    WGMMA_RS_M64N96("bf16");
}
#undef WGMMA_RS_M64N96
#define WGMMA_RS_M64N104(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %57, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n104k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51}, {%52, %53, %54, %55}, %56, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n104(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N104("f16");
  else
    WGMMA_RS_M64N104("bf16");
}
#undef WGMMA_RS_M64N104
#define WGMMA_RS_M64N112(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n112k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, {%56, %57, %58, %59}, %60, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n112(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N112("f16");
  else
    WGMMA_RS_M64N112("bf16");
}
#undef WGMMA_RS_M64N112
#define WGMMA_RS_M64N120(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %65, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n120k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59}, {%60, %61, %62, %63}, %64, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n120(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N120("f16");
  else
    WGMMA_RS_M64N120("bf16");
}
#undef WGMMA_RS_M64N120
#define WGMMA_RS_M64N128(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n128(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  if constexpr (H)
    WGMMA_RS_M64N128("f16");
  else
    WGMMA_RS_M64N128("bf16");
}
#undef WGMMA_RS_M64N128

// wgmma_rs_n: m64nNk16 for N a multiple of 8 up to 128 on the first N / 2
// accumulators of d; H: f16 operands, else bf16.
template <int N, bool H = false, int R> __device__ __forceinline__ void wgmma_rs_n(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 128 && R >= N / 2, "m64nNk16: N a multiple of 8 in [8, 128], N / 2 accumulators");
  if constexpr (N == 8)
    wgmma_rs_m64n8<H>(d, a, db, accum);
  else if constexpr (N == 16)
    wgmma_rs_m64n16<H>(d, a, db, accum);
  else if constexpr (N == 24)
    wgmma_rs_m64n24<H>(d, a, db, accum);
  else if constexpr (N == 32)
    wgmma_rs_m64n32<H>(d, a, db, accum);
  else if constexpr (N == 40)
    wgmma_rs_m64n40<H>(d, a, db, accum);
  else if constexpr (N == 48)
    wgmma_rs_m64n48<H>(d, a, db, accum);
  else if constexpr (N == 56)
    wgmma_rs_m64n56<H>(d, a, db, accum);
  else if constexpr (N == 64)
    wgmma_rs_m64n64<H>(d, a, db, accum);
  else if constexpr (N == 72)
    wgmma_rs_m64n72<H>(d, a, db, accum);
  else if constexpr (N == 80)
    wgmma_rs_m64n80<H>(d, a, db, accum);
  else if constexpr (N == 88)
    wgmma_rs_m64n88<H>(d, a, db, accum);
  else if constexpr (N == 96)
    wgmma_rs_m64n96<H>(d, a, db, accum);
  else if constexpr (N == 104)
    wgmma_rs_m64n104<H>(d, a, db, accum);
  else if constexpr (N == 112)
    wgmma_rs_m64n112<H>(d, a, db, accum);
  else if constexpr (N == 120)
    wgmma_rs_m64n120<H>(d, a, db, accum);
  else if constexpr (N == 128)
    wgmma_rs_m64n128<H>(d, a, db, accum);
}

template <int BN> struct WgCfg {
  static constexpr int BM = 128, BK = 64;
  static constexpr int STAGES = BN == 256 ? 4 : 6;
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE = A_BYTES + B_BYTES;
  static constexpr int SMEM = STAGES * STAGE + 1024;  // + alignment slack
};

__device__ __forceinline__ float silu_h(float v) { return v / (1.f + expf(-v)); }

// wg_out is gemm_wgmma's output value for accumulator a[4j + 2h + e]: the
// sum, or with SwiGLU (EPI 2) silu of it times its up partner OW/8 chunks
// on.
template <int EPI, int OW, int R> __device__ __forceinline__ float wg_out(const float (&a)[R], int j, int h, int e) {
  const float v = a[4 * j + 2 * h + e];
  if constexpr (EPI == 2) return silu_h(v) * a[4 * (j + OW / 8) + 2 * h + e];
  return v;
}

// tile_row and tile_band split persistent tile index t into its row tile
// and column band (see the order above).
template <int GROUPED> __device__ __forceinline__ int tile_row(int t, int rowTiles, int bands) {
  return GROUPED ? t / bands : t % rowTiles;
}
template <int GROUPED> __device__ __forceinline__ int tile_band(int t, int rowTiles, int bands) {
  return GROUPED ? t % bands : t / rowTiles;
}

// RowTile is where output row tile tm lies: rows [m0, m0 + rows) of x and
// y, weight rows from wrow.
struct RowTile {
  int m0, rows, wrow;
};
template <int GROUPED>
__device__ __forceinline__ RowTile row_tile(int tm, int M, const int4* tiles, int expert_rows) {
  if constexpr (GROUPED) {
    const int4 td = tiles[tm];
    return RowTile{td.y, td.z, td.x * expert_rows};
  } else {
    return RowTile{tm * 128, min(128, M - tm * 128), 0};
  }
}

// st_pair stores v0, v1 at p[0], p[1] (p aligned to two values) in one
// store, each rounded to TY as alone; ACC adds what is there first (the
// same sums as two scalar read-modify-writes).
template <typename TY, bool ACC> __device__ __forceinline__ void st_pair(TY* p, float v0, float v1) {
  if constexpr (ACC) {
    v0 += to_f32(p[0]);
    v1 += to_f32(p[1]);
  }
  p[0] = from_f32<TY>(v0);
  p[1] = from_f32<TY>(v1);
}
template <> __device__ __forceinline__ void st_pair<float, false>(float* p, float v0, float v1) {
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}
template <> __device__ __forceinline__ void st_pair<float, true>(float* p, float v0, float v1) {
  const float2 o = *reinterpret_cast<const float2*>(p);
  *reinterpret_cast<float2*>(p) = make_float2(v0 + o.x, v1 + o.y);
}
template <> __device__ __forceinline__ void st_pair<bf16_t, false>(bf16_t* p, float v0, float v1) {
  *reinterpret_cast<unsigned*>(p) = bf16x2_bits(v0, v1);
}
template <> __device__ __forceinline__ void st_pair<bf16_t, true>(bf16_t* p, float v0, float v1) {
  const unsigned o = *reinterpret_cast<const unsigned*>(p);
  bf16_t a, b;
  a.bits = (unsigned short)(o & 0xFFFFu);
  b.bits = (unsigned short)(o >> 16);
  st_pair<bf16_t, false>(p, v0 + to_f32(a), v1 + to_f32(b));
}

// quad_swap trades with lane q ^ M (M 1 or 2) the half of v whose index
// bit M differs from q's: indices a and b have the bit clear.
template <int M, typename T> __device__ __forceinline__ void quad_swap(T (&v)[4], int q) {
  constexpr int a = 0, b = M == 2 ? 1 : 2;
  const bool set = q & M;
  const T r0 = __shfl_xor_sync(0xffffffffu, set ? v[a] : v[a + M], M), r1 = __shfl_xor_sync(0xffffffffu, set ? v[b] : v[b + M], M);
  if (set) {
    v[a] = r0;
    v[b] = r1;
  } else {
    v[a + M] = r0;
    v[b + M] = r1;
  }
}

// quad_xpose transposes v across the four lanes of a quad (q = lane & 3):
// afterwards lane q holds in v[p] what lane p held in v[q].
template <typename T> __device__ __forceinline__ void quad_xpose(T (&v)[4], int q) {
  quad_swap<2>(v, q);
  quad_swap<1>(v, q);
}

// st_oct stores v0[p], v1[p] at p[2p], p[2p + 1] (p 16-byte aligned) in
// 16-byte stores, each value rounded to TY as alone; ACC adds what is
// there first (the same sums as st_pair).
template <typename TY, bool ACC>
__device__ __forceinline__ void st_oct(TY* p, const float (&v0)[4], const float (&v1)[4]) {
  if constexpr (sizeof(TY) == 2) {
    float a[8];
#pragma unroll
    for (int i = 0; i < 4; i++) a[2 * i] = v0[i], a[2 * i + 1] = v1[i];
    if constexpr (ACC) {
      const uint4 o = *reinterpret_cast<const uint4*>(p);
      const unsigned w[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
      for (int i = 0; i < 4; i++) {
        bf16_t lo, hi;
        lo.bits = (unsigned short)(w[i] & 0xFFFFu);
        hi.bits = (unsigned short)(w[i] >> 16);
        a[2 * i] += to_f32(lo);
        a[2 * i + 1] += to_f32(hi);
      }
    }
    *reinterpret_cast<uint4*>(p) =
        make_uint4(bf16x2_bits(a[0], a[1]), bf16x2_bits(a[2], a[3]), bf16x2_bits(a[4], a[5]), bf16x2_bits(a[6], a[7]));
  } else {
    float4 x = make_float4(v0[0], v1[0], v0[1], v1[1]), z = make_float4(v0[2], v1[2], v0[3], v1[3]);
    if constexpr (ACC) {
      const float4 ox = reinterpret_cast<const float4*>(p)[0], oz = reinterpret_cast<const float4*>(p)[1];
      x = make_float4(x.x + ox.x, x.y + ox.y, x.z + ox.z, x.w + ox.w);
      z = make_float4(z.x + oz.x, z.y + oz.y, z.z + oz.z, z.w + oz.w);
    }
    reinterpret_cast<float4*>(p)[0] = x;
    reinterpret_cast<float4*>(p)[1] = z;
  }
}

// WgNR: what gemm_wgmma_nr's epilogue needs to normalise and rotate the
// q and k heads of a split GEMM (qk_norm_rope's work, rope.cu): the norm
// weights of segments 0 and 1 (null: that segment is stored as computed),
// the rows' cosines and sines (rope_cs_table's, ROT floats a row, pair i's
// at 2i and 2i + 1) and eps; w0 and w1 8-byte aligned (float2 loads), the
// table 16-byte (float4).
// Zero elsewhere.
struct WgNR {
  const float* w0;
  const float* w1;
  const float* tab;
  float eps;
};

// wg_norm_rope normalises and rotates (NeoX, the first ROT channels of
// each head) every 128-column head of a tile in the accumulators, as
// qk_norm_rope computes a head from the bf16 values the plain epilogue
// would store: each value rounded to bf16 first, the square sum over the
// head, inv = 1/sqrt(ss/128 + eps), w[c] * (v * inv), the row's cosine
// and sine from the table and rope_rotate's expressions; the store then
// rounds once. A head's 128 columns are chunks 16hh .. 16hh + 15 of the tile's
// rows, each row's held by the four lanes of a quad (two columns a
// chunk), so its square sum is the thread's 32 and two shuffles, and a
// channel's rotation partner ROT/2 columns on is in the same thread
// (chunk + ROT/16). The sum runs in another order than qk_norm_rope's, so
// an output may differ from it in its last bits (TestGEMMNormRoPEGPU).
// Every thread of the warpgroup calls it (the shuffles). The thread's rows
// in the tile are rbase + rstep * mh + 8h, as the epilogue counts them.
template <int BN, int MH, int ROT, int R>
__device__ __forceinline__ void wg_norm_rope(float (&acc)[MH][R], const float* __restrict__ w, const WgNR& nr, int m0, int M,
                                             int rbase, int rstep, int lane) {
  constexpr int HEADS = BN / 128, HC = ROT / 16;
  static_assert(BN % 128 == 0 && ROT % 16 == 0 && ROT >= 16 && ROT <= 128, "heads of 128, a rotary width of 16 to 128");
  const int q = lane & 3;
#pragma unroll
  for (int mh = 0; mh < MH; mh++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = min(m0 + rbase + rstep * mh + 8 * h, M - 1);  // rows past M: computed, not stored
      const float* cs = nr.tab + (long long)row * ROT;
      float inv[HEADS];
#pragma unroll
      for (int hh = 0; hh < HEADS; hh++) {
        float ss = 0.f;
#pragma unroll
        for (int jj = 0; jj < 16; jj++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            float& a = acc[mh][4 * (16 * hh + jj) + 2 * h + e];
            a = to_f32(from_f32<bf16_t>(a));
            ss += a * a;
          }
        ss += __shfl_xor_sync(0xffffffffu, ss, 1);
        ss += __shfl_xor_sync(0xffffffffu, ss, 2);
        inv[hh] = 1.f / sqrtf(ss / 128.f + nr.eps);
      }
#pragma unroll
      for (int jj = 0; jj < HC; jj++) {
        const int c = 8 * jj + 2 * q;  // the thread's pairs c and c + 1
        const float4 t = *reinterpret_cast<const float4*>(cs + 2 * c);
        const float2 wl = *reinterpret_cast<const float2*>(w + c), wh = *reinterpret_cast<const float2*>(w + c + ROT / 2);
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float co = e ? t.z : t.x, sn = e ? t.w : t.y;
#pragma unroll
          for (int hh = 0; hh < HEADS; hh++) {
            float& lo = acc[mh][4 * (16 * hh + jj) + 2 * h + e];
            float& hi = acc[mh][4 * (16 * hh + jj + HC) + 2 * h + e];
            const float bl = (e ? wl.y : wl.x) * (lo * inv[hh]), bh = (e ? wh.y : wh.x) * (hi * inv[hh]);
            lo = bl * co - bh * sn;
            hi = bh * co + bl * sn;
          }
        }
      }
#pragma unroll
      for (int jj = 2 * HC; jj < 16; jj++) {
        const float2 wc = *reinterpret_cast<const float2*>(w + 8 * jj + 2 * q);
#pragma unroll
        for (int e = 0; e < 2; e++)
#pragma unroll
          for (int hh = 0; hh < HEADS; hh++) {
            float& a = acc[mh][4 * (16 * hh + jj) + 2 * h + e];
            a = (e ? wc.y : wc.x) * (a * inv[hh]);
          }
      }
    }
}

template <typename TY, int BN, int EPI, int GROUPED, int PP, int SPLIT, int ROT = 0>
__device__ __forceinline__ void gemm_wgmma_body(const TmaMap& ta, const TmaMap& tb, int M, int N, int K, TY* __restrict__ y,
                                                int up_row, const int4* __restrict__ tiles, const int* __restrict__ ntiles,
                                                int expert_rows, TY* y1, TY* y2, TY* y3, int c1, int c2, int c3,
                                                const WgNR& nr) {
  static_assert(!SPLIT || (EPI == 0 && !GROUPED), "split outputs: plain dense GEMMs");
  static_assert(!ROT || (SPLIT && sizeof(TY) == 2), "the norm and rotation of a split GEMM's bf16 q and k heads");
  static_assert(GROUPED == 0 || GROUPED == 1, "GROUPED: 0 dense, 1 grouped (2 and 3 were removed)");
  using C = WgCfg<BN>;
  constexpr int ST = C::STAGES;
  constexpr int OW = EPI == 2 ? BN / 2 : BN;  // output columns per tile
  static_assert(!PP || BN <= 128, "ping-pong keeps a whole tile's accumulators in one warpgroup");
  constexpr int MH = PP ? 2 : 1;  // 64-row halves of a tile one consumer warpgroup computes
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long full_bar[ST], empty_bar[ST];
  unsigned char* smem = (unsigned char*)(((unsigned long long)smem_raw + 1023) & ~1023ull);
  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < ST; s++) {
      mbar_init(smem_u32(&full_bar[s]), 1);
      mbar_init(smem_u32(&empty_bar[s]), PP ? 128 : 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int tilesM = GROUPED ? ntiles[0] : (M + C::BM - 1) / C::BM, tilesN = (N + OW - 1) / OW, ntile = tilesM * tilesN;
  const int nk = (K + C::BK - 1) / C::BK;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      int it = 0;
      for (int t = blockIdx.x; t < ntile; t += gridDim.x) {
        const RowTile rt = row_tile<GROUPED>(tile_row<GROUPED>(t, tilesM, tilesN), M, tiles, expert_rows);
        const int n0 = tile_band<GROUPED>(t, tilesM, tilesN) * OW;
        for (int kb = 0; kb < nk; kb++, it++) {
          const int s = it % ST;
          mbar_wait(smem_u32(&empty_bar[s]), ((it / ST) & 1) ^ 1);
          const unsigned sa = smem_u32(smem + s * C::STAGE), sb = sa + C::A_BYTES, fb = smem_u32(&full_bar[s]);
          mbar_expect_tx(fb, C::STAGE);
          tma_load_2d(sa, &ta, kb * C::BK, rt.m0, fb);
          if constexpr (EPI == 2) {
            tma_load_2d(sb, &tb, kb * C::BK, rt.wrow + n0, fb);
            tma_load_2d(sb + (BN / 2) * 128, &tb, kb * C::BK, up_row + rt.wrow + n0, fb);
          } else {
            tma_load_2d(sb, &tb, kb * C::BK, rt.wrow + n0, fb);
          }
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  // Cooperative (PP 0): consumer warpgroup c computes rows [64c, 64c + 64)
  // of every tile. Ping-pong (PP 1): it computes all 128 rows of every
  // other tile of this CTA (c = the tile's parity), so that its epilogue
  // runs beside the other warpgroup's MMAs; the stages still come in
  // order, each consumed by one warpgroup. A warpgroup starts a tile's
  // MMAs only after the other has issued the previous tile's (named
  // barrier 1 + c: "warpgroup c may start"): running further ahead it
  // would wait on a stage's mbarrier two or more phases early, where the
  // parity it waits for was already seen.
  const int c = wg - 1;
  const int warp = tid >> 5, lane = tid & 31;
  float acc[MH][BN / 2];
#pragma unroll
  for (int h = 0; h < MH; h++)
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[h][i] = 0.f;
  int it = 0, own = 0;
  for (int t = blockIdx.x; t < ntile; t += gridDim.x, own++) {
    if (PP && (own & 1) != c) {
      it += nk;  // the other warpgroup's tile: its stages pass by
      continue;
    }
    if (PP && own > 0) asm volatile("bar.sync %0, 256;" ::"r"(1 + c) : "memory");
    const RowTile rt = row_tile<GROUPED>(tile_row<GROUPED>(t, tilesM, tilesN), M, tiles, expert_rows);
    const int n0 = tile_band<GROUPED>(t, tilesM, tilesN) * OW;
    int prev = -1;
#pragma unroll
    for (int h = 0; h < MH; h++) wg_pin(acc[h]);
    for (int kb = 0; kb < nk; kb++, it++) {
      const int s = it % ST;
      mbar_wait(smem_u32(&full_bar[s]), (it / ST) & 1);
      const unsigned sa = smem_u32(smem + s * C::STAGE) + (PP ? 0 : c * 64 * 128),
                     sb = smem_u32(smem + s * C::STAGE + C::A_BYTES);
      wg_fence();
#pragma unroll
      for (int k = 0; k < C::BK / 16; k++)
#pragma unroll
        for (int h = 0; h < MH; h++)
          wgmma_bn<BN>(acc[h], wg_desc(sa + h * 64 * 128 + 32 * k), wg_desc(sb + 32 * k), kb > 0 || k > 0);
      wg_commit();
      wg_wait<1>();  // the previous k-block's MMAs are done: release its stage
      if (prev >= 0) mbar_arrive(smem_u32(&empty_bar[prev]));
      prev = s;
    }
    if (PP && t + gridDim.x < ntile) asm volatile("bar.arrive %0, 256;" ::"r"(2 - c) : "memory");
    wg_wait<0>();
#pragma unroll
    for (int h = 0; h < MH; h++) wg_pin(acc[h]);
    if (prev >= 0) mbar_arrive(smem_u32(&empty_bar[prev]));
    if (nk == 0) {
#pragma unroll
      for (int h = 0; h < MH; h++)
#pragma unroll
        for (int i = 0; i < BN / 2; i++) acc[h][i] = 0.f;
    }

    // Epilogue: register i of chunk j = i/4 holds row (lane/4) + 8*((i/2)&1)
    // of this warp's 16 (of 64-row half mh), column 8j + 2*(lane%4) + (i&1).
    // Where y rows hold whole 16-byte chunks (N a multiple of 8, y 16-byte
    // aligned: oct), the four lanes of a row transpose four chunks' column
    // pairs (quad_xpose) so that each stores a whole 8-column chunk: a warp
    // store then fills 16 sectors where one of pairs half-fills 8. Else a
    // thread's two adjacent columns go in one store where N is even and y
    // aligned to two values (pair2), in two otherwise.
    // SPLIT: columns [c_s, c_s+1) (c_0 0, c_4 N) go to y_s, rows c_s+1 - c_s
    // apart (a prefill's q, k, v and gate from one GEMM over their
    // concatenated weights); lower puts every c_s on a multiple of the
    // tile's width, so a tile lies in one segment (yt from column ct, rows
    // ldt apart). Unused segments are empty (c_s = N).
    TY* yt = y;
    int ct = 0, ldt = N;
    if constexpr (SPLIT) {
      const int s = (n0 >= c1) + (n0 >= c2) + (n0 >= c3);
      yt = s == 0 ? y : s == 1 ? y1 : s == 2 ? y2 : y3;
      ct = s == 0 ? 0 : s == 1 ? c1 : s == 2 ? c2 : c3;
      ldt = (s == 0 ? c1 : s == 1 ? c2 : s == 2 ? c3 : N) - ct;
      if constexpr (ROT > 0) {
        const float* w = s == 0 ? nr.w0 : s == 1 ? nr.w1 : nullptr;
        if (w != nullptr) wg_norm_rope<BN, MH, ROT>(acc, w, nr, rt.m0, M, 64 * (PP ? 0 : c) + 16 * warp + (lane >> 2), 64, lane);
      }
    }
    const bool oct = (ldt & 7) == 0 && (reinterpret_cast<unsigned long long>(yt) & 15) == 0;
    const bool pair2 = (ldt & 1) == 0 && (reinterpret_cast<unsigned long long>(yt) & (2 * sizeof(TY) - 1)) == 0;
    if (oct) {
      const int q = lane & 3;
#pragma unroll
      for (int mh = 0; mh < MH; mh++) {
        const float(&a)[BN / 2] = acc[mh];
        const int r0 = 64 * (PP ? mh : c) + 16 * warp + (lane >> 2);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const bool rowok = r0 + 8 * h < rt.rows;
          TY* yrow = yt + (long long)(rt.m0 + r0 + 8 * h) * ldt;
#pragma unroll
          for (int jb = 0; jb < OW / 32; jb++) {
            float v0[4], v1[4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
              v0[jj] = wg_out<EPI, OW>(a, 4 * jb + jj, h, 0);
              v1[jj] = wg_out<EPI, OW>(a, 4 * jb + jj, h, 1);
            }
            const int col = n0 + 8 * (4 * jb + q);  // this lane's chunk after the transpose
            if constexpr (sizeof(TY) == 2 && EPI != 1) {
              unsigned w[4];
#pragma unroll
              for (int jj = 0; jj < 4; jj++) w[jj] = bf16x2_bits(v0[jj], v1[jj]);
              quad_xpose(w, q);
              if (rowok && col < N) *reinterpret_cast<uint4*>(yrow + (col - ct)) = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
              quad_xpose(v0, q);
              quad_xpose(v1, q);
              if (rowok && col < N) st_oct<TY, EPI == 1>(yrow + (col - ct), v0, v1);
            }
          }
        }
      }
      continue;
    }
#pragma unroll
    for (int mh = 0; mh < MH; mh++) {
      const float(&a)[BN / 2] = acc[mh];
      const int r0 = 64 * (PP ? mh : c) + 16 * warp + (lane >> 2);  // within the tile
#pragma unroll
      for (int j = 0; j < OW / 8; j++) {
        const int col = n0 + 8 * j + 2 * (lane & 3);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          if (r0 + 8 * h >= rt.rows) continue;
          const int row = rt.m0 + r0 + 8 * h;
          float v0 = wg_out<EPI, OW>(a, j, h, 0), v1 = wg_out<EPI, OW>(a, j, h, 1);
          TY* p = yt + (long long)row * ldt + (col - ct);
          if (col + 1 < N && pair2) {
            st_pair<TY, EPI == 1>(p, v0, v1);
          } else if (col + 1 < N) {
            if constexpr (EPI == 1) {
              v0 += to_f32(p[0]);
              v1 += to_f32(p[1]);
            }
            p[0] = from_f32<TY>(v0);
            p[1] = from_f32<TY>(v1);
          } else if (col < N) {
            if constexpr (EPI == 1) v0 += to_f32(p[0]);
            p[0] = from_f32<TY>(v0);
          }
        }
      }
    }
  }
}

#define GEMM_WGMMA_PARAMS                                                                                                         \
  const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb, int M, int N, int K, TY *__restrict__ y, int up_row,      \
      const int4 *__restrict__ tiles, const int *__restrict__ ntiles, int expert_rows, TY *y1, TY *y2, TY *y3, int c1, int c2, \
      int c3
#define GEMM_WGMMA_ARGS ta, tb, M, N, K, y, up_row, tiles, ntiles, expert_rows, y1, y2, y3, c1, c2, c3
template <typename TY, int BN, int EPI, int GROUPED, int PP, int SPLIT>
__global__ void __launch_bounds__(384, 1) gemm_wgmma(GEMM_WGMMA_PARAMS) {
  pdl_wait();
  gemm_wgmma_body<TY, BN, EPI, GROUPED, PP, SPLIT>(GEMM_WGMMA_ARGS, WgNR{});
}
// gemm_wgmma_nr is gemm_wgmma's split form (a prefill's q, k, v and gate)
// normalising and rotating the q and k heads as it stores them
// (wg_norm_rope: lower.GEMMNormRoPE puts qk_norm_rope's work here, after
// a rope_cs_table launch writing ntab).
template <typename TY, int BN, int PP, int ROT>
__global__ void __launch_bounds__(384, 1) gemm_wgmma_nr(GEMM_WGMMA_PARAMS, const float* __restrict__ nw0,
                                                        const float* __restrict__ nw1, const float* __restrict__ ntab,
                                                        float neps) {
  pdl_wait();
  gemm_wgmma_body<TY, BN, 0, 0, PP, 1, ROT>(GEMM_WGMMA_ARGS, WgNR{nw0, nw1, ntab, neps});
}
#undef GEMM_WGMMA_PARAMS
#undef GEMM_WGMMA_ARGS

// f16x2_sat: lo and hi rounded to f16, a pair; past f16's range they stay
// at its largest finite value (NaN stays NaN).
__device__ __forceinline__ unsigned f16x2_sat(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// bf16x8_to_f16: 8 bf16 values as f16 (exact within f16's range, which
// the gate+up input of a normed token keeps to).
__device__ __forceinline__ uint4 bf16x8_to_f16(uint4 v) {
  unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) w[i] = f16x2_sat(__uint_as_float(w[i] << 16), __uint_as_float(w[i] & 0xFFFF0000u));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// xg[p] = x[sorted[p] / k]: the routes' activation rows grouped by expert
// (R rows of H bf16, H a multiple of 8), for the grouped GEMM's TMA loads;
// F16: converted to f16 (the _F16_H types' operands). A warp a row: one
// load of its token, then up to 8 16-byte chunks a lane in flight (H200,
// S-2.1 at 2048 tokens: 41.5 us; a thread a chunk, each behind its own
// sorted[p], took 45.6).
template <bool F16>
__device__ __forceinline__ void gather_rows(int R, int k, int H, const bf16_t* __restrict__ x, const int* __restrict__ sorted,
                                            unsigned short* __restrict__ xg) {
  constexpr int U = 8;
  const int hv = H / 8, lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
  for (long long p = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); p < R; p += warps) {
    const uint4* src = reinterpret_cast<const uint4*>(x + (long long)(sorted[p] / k) * H);
    uint4* dst = reinterpret_cast<uint4*>(xg + p * H);
    for (int v0 = lane; v0 < hv; v0 += 32 * U) {
      uint4 c[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v0 + 32 * u < hv) c[u] = src[v0 + 32 * u];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v0 + 32 * u < hv) dst[v0 + 32 * u] = F16 ? bf16x8_to_f16(c[u]) : c[u];
    }
  }
}
__global__ void __launch_bounds__(256) moe_gather_rows(int R, int k, int H, const bf16_t* __restrict__ x,
                                                       const int* __restrict__ sorted, bf16_t* __restrict__ xg) {
  pdl_wait();
  gather_rows<false>(R, k, H, x, sorted, reinterpret_cast<unsigned short*>(xg));
}
__global__ void __launch_bounds__(256) moe_gather_rows_f16(int R, int k, int H, const bf16_t* __restrict__ x,
                                                           const int* __restrict__ sorted, half_t* __restrict__ xg) {
  pdl_wait();
  gather_rows<true>(R, k, H, x, sorted, reinterpret_cast<unsigned short*>(xg));
}

#define QT_Q8_0_H 8
#define QT_Q4_K_H 12
#define QT_Q5_K_H 13
#define QT_Q6_K_H 14
#define QT_IQ4_XS_H 23
// Not a quantisation: plain bf16 weight rows through gemm_wgmma_q's path
// (QA<QT_BF16_H>; ggml's id for bf16), so that the grouped bf16 experts
// get its MMAs as wide as each tile's tokens (the weights as A).
#define QT_BF16_H 30
// f16 operands (not ggml ids): QA<QT_Q4_K_F16_H>, QA<QT_Q8_0_F16_H>,
// QA<QT_IQ4_XS_F16_H>.
#define QT_Q4_K_F16_H 112
#define QT_Q8_0_F16_H 108
#define QT_IQ4_XS_F16_H 123
#define QT_Q5_K_F16_H 113
#define QT_Q6_K_F16_H 114
// boxed_qt: q5_k's and q6_k's ids, whose stage's quant bytes are NBOX TMA
// boxes of BOX bytes a row (q_words_at, q_boxes) and whose frag takes the
// stage's index in its block (staged_frags).
template <int QT>
constexpr bool boxed_qt = QT == QT_Q5_K_H || QT == QT_Q5_K_F16_H || QT == QT_Q6_K_H || QT == QT_Q6_K_F16_H;

__device__ __forceinline__ unsigned pack_f16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float f16_bits_h(unsigned short b) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
  return f;
}
__device__ __forceinline__ long long align256h(long long n) { return (n + 255) & ~255LL; }
// Dequantising without I2F (quarter rate on sm_90) and without shifting
// each field down: mag(v, mask) = (v & mask) | bits(2^23) is the float
// 2^23 + field * 2^s for a field at bits [s, s+8), s + 8 <= 16 (one lop3),
// minus 2^23 (or 2^23 + 128 * 2^s for an int8 stored with its sign bit
// flipped) the field times 2^s exactly; a scale pre-multiplied by 2^-s
// (exact: a power of two) then gives the same float as scale * field.
// About 3.75 instructions a weight where I2F, shifts and masks took 5.5
// (grouped q4_k experts at S-2.1: 1.97 -> 1.87 ms, BenchmarkMoEQuant).
__device__ __forceinline__ float mag(unsigned v, unsigned mask) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(v), "r"(mask), "r"(0x4B000000u));
  return __int_as_float(r);
}
// row_tile_n: token tile tm of BN tokens (dense) or of the schedule
// (grouped: rows of one expert, weight rows from row0 + expert *
// expert_rows; dense: from row0, a row block of the matrix).
template <int GROUPED, int BN>
__device__ __forceinline__ RowTile row_tile_n(int tm, int T, const int4* tiles, int expert_rows, int row0) {
  if constexpr (GROUPED) {
    const int4 td = tiles[tm];
    return RowTile{td.y, td.z, row0 + td.x * expert_rows};
  } else {
    return RowTile{tm * BN, min(BN, T - tm * BN), row0};
  }
}

// ------------------------------------------------- quantised weights (A)
//
// gemm_wgmma_q: y [T, N] = x [T, K] w^T with w block-quantised (q8_0, q4_k or
// iq4_xs in the device layout of quant.cu), or plain bf16 rows (QT_BF16_H:
// bf16 grouped experts of short chunks, lower.BF16QMaxAvgRows), for prefill. The weights are the
// MMA's A operand: each consumer thread dequantises its two fragment rows'
// 32 weights of a stage straight into the wgmma's A registers (for q4_k
// 1.6% faster end to end than through a bf16 tile in shared memory, the
// kernel's first form); no bf16 copy in global memory. The tokens are the
// B operand, bf16 (f16 for the _F16_H types, their weights then f16 too) from
// TMA-loaded swizzled tiles. A CTA computes NC x 64
// weight rows (NC consumer warpgroups of 64, NC 2 or 4) x BN tokens, its
// MMAs as wide as the tile's rows rounded up to VN (wg_rs_rows). The
// producer warpgroup brings each stage's raw quant bytes of those rows (NC
// TMA boxes of 64 rows: QB bytes per row, q_boxes) and the token tile, and
// its 128 threads stage the rows' scales as floats (ScaleRows), so the
// consumers' loop neither loads nor converts them.
// Fragment rows: in a warpgroup's 64 rows, warp w, lane l holds rows
// 16w + l/4 (ra) and ra + 8 (rb). With SwiGLU (EPI 2) they are gate row f
// and up row f of one output feature f, so the epilogue pairs them in
// registers: a CTA then covers 32 x NC features.
// PIPE keeps two sets of A registers, so a warpgroup dequantises stage
// kb + 1 while its MMAs of stage kb run and the tensor cores always have
// the next stage's MMAs queued; without it each stage's MMAs are waited
// for before the next stage's dequantisation, and the other warpgroups
// fill the gap. With NC 4 the producer then keeps 32 registers, not 40,
// so that the consumers get 112.

template <int QT> struct QA;

// Global loads the compiler may not move: the producer's header loads,
// issued before it waits for a stage's slot, stay there.
__device__ __forceinline__ unsigned ldg_u32(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned short ldg_u16(const void* p) {
  unsigned short v;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ldg_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned ld_shared4(unsigned a) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}

// Each QA<QT> gives, for the register path of gemm_wgmma_q:
//   QB        quant bytes of a row per 64-element stage (TMA-loaded);
//   qcol      stage kb's first column in the quant rows' tensor map;
//   F16       whether the MMAs take f16 operands (else bf16);
//   SC, Hdr, HDR_KB, scale_base, hdr, put_scales: the SC bytes of a row's
//             scales the producer stages (ScaleRows), from the Hdr it
//             loads every HDR_KB stages;
//   Scales, scales: a consumer's read of them;
//   Words, words: the quant words a lane needs (words_at, words_sel);
//   frag:     the row's A fragment registers for the stage's four k16
//             steps, o[2s] columns 16s + 2tq4 (+1), o[2s + 1] those + 8.
// words_at is a row's stage offset plus 4 (tq4 >> 1): the word holding
// the lane's pair; words_sel picks its half.
__device__ __forceinline__ unsigned words_at(int row, int qb, int tq4) { return row * qb + 4 * (tq4 >> 1); }
__device__ __forceinline__ unsigned words_sel(int tq4) { return 0x5410u + 0x2222u * (tq4 & 1); }

template <> struct QA<QT_Q8_0_H> {
  static constexpr int QB = 64, SC = 16, HDR_KB = 1;
  static constexpr bool F16 = false;
  static __device__ __forceinline__ int qcol(int kb) { return kb * QB; }
  struct Hdr {
    unsigned d2;  // the stage's two f16 scales (columns 0..31, 32..63)
  };
  static __device__ __forceinline__ const unsigned char* scale_base(const unsigned char* w, long long wrows, int K) {
    return w + align256h(wrows * K);
  }
  static __device__ __forceinline__ Hdr hdr(const unsigned char*, const unsigned char* sb, long long grow, int K, int kb) {
    return Hdr{ldg_u32(reinterpret_cast<const unsigned*>(sb) + grow * (K / 64) + kb)};
  }
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int) {
    const float d = f16_bits_h((unsigned short)(hd.d2 & 0xFFFF)), e = f16_bits_h((unsigned short)(hd.d2 >> 16));
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "f"(d), "f"(d * 0x1p-8f), "f"(e), "f"(e * 0x1p-8f) : "memory");
  }
  struct Scales {
    float d, d8, e, e8;
  };
  static __device__ __forceinline__ Scales scales(unsigned sa) {
    Scales r;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.d), "=f"(r.d8), "=f"(r.e), "=f"(r.e8) : "r"(sa));
    return r;
  }
  // Words: step s's bytes 16s + 2tq4 (+1) and those + 8, one int8 weight each.
  struct Words {
    unsigned w[4];
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    Words r;
#pragma unroll
    for (int s = 0; s < 4; s++) r.w[s] = __byte_perm(ld_shared4(q + 16 * s), ld_shared4(q + 16 * s + 8), sel);
    return r;
  }
  // Bytes as int8 + 128 in place (mag: 2^23 + 128 and 2^23 + 32768 off).
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, unsigned (&o)[8]) {
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const float d = s < 2 ? sc.d : sc.e, d8 = s < 2 ? sc.d8 : sc.e8;
      const unsigned v = wd.w[s] ^ 0x80808080u, u = v >> 16;
      o[2 * s] = pack_bf16x2(d * (mag(v, 0xFFu) - 8388736.f), d8 * (mag(v, 0xFF00u) - 8421376.f));
      o[2 * s + 1] = pack_bf16x2(d * (mag(u, 0xFFu) - 8388736.f), d8 * (mag(u, 0xFF00u) - 8421376.f));
    }
  }
};

template <> struct QA<QT_Q4_K_H> {
  static constexpr int QB = 32, SC = 32, HDR_KB = 4;
  static constexpr bool F16 = false;
  // qcol: stage kb's 32 quant bytes, at 16 + 32 (kb % 4) of block kb / 4's
  // 144-byte body.
  static __device__ __forceinline__ int qcol(int kb) { return (kb >> 2) * 144 + 16 + 32 * (kb & 3); }
  // Hdr: a row's 256-element block: its 8 scale and 8 min bytes and
  // (d, dmin). The staged scales: fl fl8 ol fh fh8 oh, the factors and
  // offsets of the stage's low (sub-block 2j) and high (2j + 1) nibbles.
  struct Hdr {
    uint4 h;
    unsigned dd;
  };
  static __device__ __forceinline__ const unsigned char* scale_base(const unsigned char* w, long long wrows, int K) {
    return w + align256h(wrows * (K / 256) * 144);
  }
  // hdr of block b = kb / 4: its first 16 bytes in w, (d, dmin) at the
  // scale base.
  static __device__ __forceinline__ Hdr hdr(const unsigned char* w, const unsigned char* sb, long long grow, int K, int b) {
    const long long bi = grow * (K / 256) + b;
    return Hdr{ldg_v4(w + bi * 144), ldg_u32(reinterpret_cast<const unsigned*>(sb) + bi)};
  }
  // sub: stage j's scale bytes sc and min bytes m (its low nibbles' in
  // bits 0-7, its high nibbles' in 8-15).
  static __device__ __forceinline__ void sub(const Hdr& hd, int j, unsigned& sc, unsigned& m) {
    const unsigned sh = 16 * (j & 1);
    sc = ((j < 2 ? hd.h.x : hd.h.y) >> sh) & 0xFFFF, m = ((j < 2 ? hd.h.z : hd.h.w) >> sh) & 0xFFFF;
  }
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    unsigned sc, m;
    sub(hd, j, sc, m);
    const float d = f16_bits_h((unsigned short)(hd.dd & 0xFFFF)), dmin = f16_bits_h((unsigned short)(hd.dd >> 16));
    const float fl = d * (float)(sc & 0xFF), ol = dmin * (float)(m & 0xFF);
    const float fh = d * (float)(sc >> 8) * 0x1p-4f, oh = dmin * (float)(m >> 8);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "f"(fl), "f"(fl * 0x1p-8f), "f"(ol), "f"(fh) : "memory");
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(sa + 16), "f"(fh * 0x1p-8f), "f"(oh) : "memory");
  }
  struct Scales {
    float fl, fl8, ol, fh, fh8, oh;
  };
  static __device__ __forceinline__ Scales scales(unsigned sa) {
    Scales r;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.fl), "=f"(r.fl8), "=f"(r.ol), "=f"(r.fh) : "r"(sa));
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(r.fh8), "=f"(r.oh) : "r"(sa + 16));
    return r;
  }
  // Words: the u16 at bytes 8i + 2tq4 (byte l holds column l in its low
  // nibble, 32 + l in its high one): w01 those of i = 0, 1, w23 of 2, 3.
  struct Words {
    unsigned w01, w23;
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    return Words{__byte_perm(ld_shared4(q), ld_shared4(q + 8), sel), __byte_perm(ld_shared4(q + 16), ld_shared4(q + 24), sel)};
  }
  // Steps 0, 1 the low nibbles, 2, 3 the high ones; a nibble at bit 4 or
  // 12 is 16 or 4096 times its value, which fh's 2^-4 and fh8 undo.
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, unsigned (&o)[8]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const unsigned v = i ? wd.w23 : wd.w01, u = v >> 16;
      o[2 * i] = pack_bf16x2(sc.fl * (mag(v, 0xFu) - 8388608.f) - sc.ol, sc.fl8 * (mag(v, 0xF00u) - 8388608.f) - sc.ol);
      o[2 * i + 1] = pack_bf16x2(sc.fl * (mag(u, 0xFu) - 8388608.f) - sc.ol, sc.fl8 * (mag(u, 0xF00u) - 8388608.f) - sc.ol);
      o[4 + 2 * i] = pack_bf16x2(sc.fh * (mag(v, 0xF0u) - 8388608.f) - sc.oh, sc.fh8 * (mag(v, 0xF000u) - 8388608.f) - sc.oh);
      o[5 + 2 * i] = pack_bf16x2(sc.fh * (mag(u, 0xF0u) - 8388608.f) - sc.oh, sc.fh8 * (mag(u, 0xF000u) - 8388608.f) - sc.oh);
    }
  }
};

// Q4_K with f16 MMA operands (the tokens f16 too: moe_gather_rows_f16
// converts them), which make the dequantisation exact and short: a
// nibble or'ed into an f16 1024 is 1024 + n (low nibble) or 1024 + 16 n
// (high), so one f16 FMA with the integer scale sc (sc / 16) and -1024 sc
// (-64 sc) gives sc n exactly (at most 945), and a second d sc n - dmin m
// with d exact and dmin m rounded to f16: each weight within f16's
// rounding of the float dequantisation (bf16's is 8 times coarser), three
// instructions a pair where the float path takes seven.
template <> struct QA<QT_Q4_K_F16_H> : QA<QT_Q4_K_H> {
  static constexpr bool F16 = true;
  // Staged: (sc, sc), (-1024 sc, ..) of the low nibbles, (sc / 16, ..),
  // (-64 sc, ..) of the high ones, (d, d), (-dmin m, ..) low and high.
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    unsigned sc, m;
    sub(hd, j, sc, m);
    const float dmin = f16_bits_h((unsigned short)(hd.dd >> 16));
    const float sl = (float)(sc & 0xFF), shi = (float)(sc >> 8);
    const unsigned d2 = (hd.dd & 0xFFFF) * 0x10001u;
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "r"(pack_f16(sl, sl)), "r"(pack_f16(-1024.f * sl, -1024.f * sl)),
                 "r"(pack_f16(shi * 0.0625f, shi * 0.0625f)), "r"(pack_f16(-64.f * shi, -64.f * shi))
                 : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(sa + 16), "r"(d2), "r"(pack_f16(-dmin * (float)(m & 0xFF), -dmin * (float)(m & 0xFF))),
                 "r"(pack_f16(-dmin * (float)(m >> 8), -dmin * (float)(m >> 8))), "r"(0u)
                 : "memory");
  }
  struct Scales {
    unsigned sl, cl, sh, ch, d, ol, oh, pad;
  };
  static __device__ __forceinline__ Scales scales(unsigned sa) {
    Scales r;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(r.sl), "=r"(r.cl), "=r"(r.sh), "=r"(r.ch) : "r"(sa));
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(r.d), "=r"(r.ol), "=r"(r.oh), "=r"(r.pad) : "r"(sa + 16));
    return r;
  }
  // Words: x[i], the lane's two bytes of the u16 at bytes 8i + 2tq4 (byte
  // l holds column l in its low nibble, 32 + l in its high one) moved to
  // bytes 0 and 2: each pair of nibbles then sits in the two f16 halves.
  struct Words {
    unsigned x[4];
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    const unsigned sp = 0x4140u + 0x0202u * ((sel >> 1) & 1);  // bytes 2h, 2h + 1 to 0 and 2, zeros between
    Words r;
#pragma unroll
    for (int i = 0; i < 4; i++) r.x[i] = __byte_perm(ld_shared4(q + 8 * i), 0, sp);
    return r;
  }
  static __device__ __forceinline__ unsigned h2(unsigned x, unsigned mask, unsigned s, unsigned c, unsigned d, unsigned o) {
    unsigned n;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(n) : "r"(x), "r"(mask), "r"(0x64006400u));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(n) : "r"(n), "r"(s), "r"(c));  // sc n, exact
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(n) : "r"(n), "r"(d), "r"(o));
    return n;
  }
  // Steps 0, 1 the low nibbles, 2, 3 the high ones.
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, unsigned (&o)[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      o[i] = h2(wd.x[i], 0x000F000Fu, sc.sl, sc.cl, sc.d, sc.ol);
      o[4 + i] = h2(wd.x[i], 0x00F000F0u, sc.sh, sc.ch, sc.d, sc.oh);
    }
  }
};

// Q8_0 with f16 operands: a byte b = q + 128 (the sign bit flipped) put
// under an f16 1024 (a PRMT with 0x64 bytes) is 1024 + b exactly, 1152
// off gives q, and one multiply by the f16 d rounds once: each weight
// within f16's rounding of q d. Three instructions a pair where the
// float path takes eight.
template <> struct QA<QT_Q8_0_F16_H> : QA<QT_Q8_0_H> {
  static constexpr bool F16 = true;
  // Staged: (d, d), (e, e), the stage's two f16 scales, each twice.
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int) {
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(sa), "r"((hd.d2 & 0xFFFF) * 0x10001u), "r"((hd.d2 >> 16) * 0x10001u)
                 : "memory");
  }
  struct Scales {
    unsigned d, e;
  };
  static __device__ __forceinline__ Scales scales(unsigned sa) {
    Scales r;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(r.d), "=r"(r.e) : "r"(sa));
    return r;
  }
  // h2: bytes i, i + 1 of b (each q + 128) as the f16 pair q d.
  static __device__ __forceinline__ unsigned h2(unsigned b, unsigned sel, unsigned d) { return h2_of(__byte_perm(b, 0x64646464u, sel), d); }
  // h2_of: n, the f16 pair 1024 + (q + 128), as q d.
  static __device__ __forceinline__ unsigned h2_of(unsigned n, unsigned d) {
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(n) : "r"(n), "r"(0xE480E480u));  // -1152: q, exact
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(n) : "r"(n), "r"(d));
    return n;
  }
  // b[s]: step s's words with each byte's sign bit flipped (q + 128).
  static __device__ __forceinline__ void frag_biased(const unsigned (&b)[4], const Scales& sc, unsigned (&o)[8]) {
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const unsigned d = s < 2 ? sc.d : sc.e;
      o[2 * s] = h2(b[s], 0x4140u, d);
      o[2 * s + 1] = h2(b[s], 0x4342u, d);
    }
  }
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, unsigned (&o)[8]) {
    const unsigned b[4] = {wd.w[0] ^ 0x80808080u, wd.w[1] ^ 0x80808080u, wd.w[2] ^ 0x80808080u, wd.w[3] ^ 0x80808080u};
    frag_biased(b, sc, o);
  }
};

// IQ4_XS: a stage is sub-blocks 2j and 2j + 1 (j = kb % 4) of a row's
// 256-element block: 32 bytes of qs, a sub-block's element i in the low
// nibble of its byte i and element 16 + i in the high one, each nibble an
// index into the non-linear table (iq4_lookup). Once looked up they are
// int8 values in the order q8_0's stage holds its bytes, so q8_0's frag
// dequantises them, with each sub-block's d * (ls - 32) as its scale.
template <> struct QA<QT_IQ4_XS_H> {
  static constexpr int QB = 32, SC = 16, HDR_KB = 4;
  static constexpr bool F16 = false;
  static __device__ __forceinline__ int qcol(int kb) { return kb * QB; }
  struct Hdr {
    uint2 h;  // f16 d, u16 scales_h; scales_l[4]
  };
  static __device__ __forceinline__ const unsigned char* scale_base(const unsigned char* w, long long wrows, int K) {
    return w + align256h(wrows * (K / 256) * 128);
  }
  static __device__ __forceinline__ Hdr hdr(const unsigned char*, const unsigned char* sb, long long grow, int K, int b) {
    const unsigned* p = reinterpret_cast<const unsigned*>(sb + (grow * (K / 256) + b) * 8);
    return Hdr{make_uint2(ldg_u32(p), ldg_u32(p + 1))};
  }
  // sub: the scales d * (ls - 32) of stage j's sub-blocks 2j and 2j + 1.
  static __device__ __forceinline__ void sub(const Hdr& hd, int j, float& d0, float& d1) {
    const float d = f16_bits_h((unsigned short)(hd.h.x & 0xFFFF));
    const unsigned sh = hd.h.x >> 16, sl = (hd.h.y >> (8 * j)) & 0xFF;
    const int ls0 = (int)((sl & 0xF) | (((sh >> (4 * j)) & 3) << 4)), ls1 = (int)((sl >> 4) | (((sh >> (4 * j + 2)) & 3) << 4));
    d0 = d * (float)(ls0 - 32), d1 = d * (float)(ls1 - 32);
  }
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    float d0, d1;
    sub(hd, j, d0, d1);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "f"(d0), "f"(d0 * 0x1p-8f), "f"(d1), "f"(d1 * 0x1p-8f) : "memory");
  }
  using Scales = QA<QT_Q8_0_H>::Scales;
  static __device__ __forceinline__ Scales scales(unsigned sa) { return QA<QT_Q8_0_H>::scales(sa); }
  // Words: the lane's bytes 2tq4 (+1) and those + 8 of each sub-block.
  struct Words {
    unsigned w[2];
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    return Words{__byte_perm(ld_shared4(q), ld_shared4(q + 8), sel), __byte_perm(ld_shared4(q + 16), ld_shared4(q + 24), sel)};
  }
  // Steps 0, 1: sub-block 2j's low and high nibbles; 2, 3: 2j + 1's.
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, unsigned (&o)[8]) {
    QA<QT_Q8_0_H>::Words v;
#pragma unroll
    for (int j = 0; j < 2; j++) {
      int lo, hi;
      iq4_lookup((int)wd.w[j], lo, hi);
      v.w[2 * j] = (unsigned)lo;
      v.w[2 * j + 1] = (unsigned)hi;
    }
    QA<QT_Q8_0_H>::frag(v, sc, o);
  }
};

// IQ4_XS with f16 operands: the table looked up with 128 added to each
// value (iq4_lookup_raw<true>), then q8_0's f16 path with each sub-block's
// scale d * (ls - 32) rounded to f16: two roundings of f16's, each 8 times
// finer than bf16's.
template <> struct QA<QT_IQ4_XS_F16_H> : QA<QT_IQ4_XS_H> {
  static constexpr bool F16 = true;
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    float d0, d1;
    sub(hd, j, d0, d1);
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(sa), "r"(pack_f16(d0, d0)), "r"(pack_f16(d1, d1)) : "memory");
  }
  using Scales = QA<QT_Q8_0_F16_H>::Scales;
  static __device__ __forceinline__ Scales scales(unsigned sa) { return QA<QT_Q8_0_F16_H>::scales(sa); }
  // Steps 0, 1: sub-block 2j's low and high nibbles; 2, 3: 2j + 1's: q8_0's
  // frag_biased on the lookup's interleaved words (iq4_lookup_raw), each
  // pair's two bytes taken where the lookup left them.
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, unsigned (&o)[8]) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
      unsigned r0, r1;
      iq4_lookup_raw<true>(wd.w[j], r0, r1);
      const unsigned d = j == 0 ? sc.d : sc.e;
      // Each pair's bytes under 0x64 bytes: r's bytes 0, 2 (selector 0x0604,
      // r the second operand) or 1, 3 (0x0705).
      using Q8 = QA<QT_Q8_0_F16_H>;
      o[4 * j] = Q8::h2_of(prmt(0x64646464u, r0, 0x0604u), d);      // low nibbles 0, 1
      o[4 * j + 1] = Q8::h2_of(prmt(0x64646464u, r1, 0x0604u), d);  // 2, 3
      o[4 * j + 2] = Q8::h2_of(prmt(0x64646464u, r0, 0x0705u), d);  // high nibbles 0, 1
      o[4 * j + 3] = Q8::h2_of(prmt(0x64646464u, r1, 0x0705u), d);  // 2, 3
    }
  }
};

// Q5_K: q4_k's stage (sub-blocks 2j and 2j + 1 of a 256-element block, j =
// kb % 4, as the low and high nibbles of 32 qs bytes) with a fifth bit a
// weight: bit 2j (low nibbles) or 2j + 1 (high) of qh[l] for the weight of
// qs byte l. A stage's quant bytes (QB 64 a row) are two TMA boxes of 64
// rows x 32 bytes: qs[32j ..+32] and the block's qh[32] (every stage
// brings it again, the later ones from L2), so qh's words sit 2 KiB after
// qs's at the same offsets. Scales as q4_k's, the high nibbles' without
// its 2^-4 (they are shifted down here): each weight sc * q - m as
// QD<QT_Q5_K> computes it.
template <> struct QA<QT_Q5_K_H> : QA<QT_Q4_K_H> {
  static constexpr int QB = 64, BOX = 32, NBOX = 2;
  static __device__ __forceinline__ int qcol_box(int kb, int i) {
    const int base = (kb >> 2) * 176;
    return base + (i == 0 ? 48 + 32 * (kb & 3) : 16);
  }
  static __device__ __forceinline__ const unsigned char* scale_base(const unsigned char* w, long long wrows, int K) {
    return w + align256h(wrows * (K / 256) * 176);
  }
  static __device__ __forceinline__ Hdr hdr(const unsigned char* w, const unsigned char* sb, long long grow, int K, int b) {
    const long long bi = grow * (K / 256) + b;
    return Hdr{ldg_v4(w + bi * 176), ldg_u32(reinterpret_cast<const unsigned*>(sb) + bi)};
  }
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    unsigned sc, m;
    sub(hd, j, sc, m);
    const float d = f16_bits_h((unsigned short)(hd.dd & 0xFFFF)), dmin = f16_bits_h((unsigned short)(hd.dd >> 16));
    const float fl = d * (float)(sc & 0xFF), ol = dmin * (float)(m & 0xFF);
    const float fh = d * (float)(sc >> 8), oh = dmin * (float)(m >> 8);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "f"(fl), "f"(fl * 0x1p-8f), "f"(ol), "f"(fh) : "memory");
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(sa + 16), "f"(fh * 0x1p-8f), "f"(oh) : "memory");
  }
  // Words: q4_k's (w01, w23) and the qh bytes at the same offsets.
  struct Words {
    unsigned w01, w23, h01, h23;
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    return Words{__byte_perm(ld_shared4(q), ld_shared4(q + 8), sel), __byte_perm(ld_shared4(q + 16), ld_shared4(q + 24), sel),
                 __byte_perm(ld_shared4(q + 2048), ld_shared4(q + 2056), sel), __byte_perm(ld_shared4(q + 2064), ld_shared4(q + 2072), sel)};
  }
  // five: the four five-bit values of word v's nibbles at bit nb (0 low, 4
  // high), a byte each, their fifth bits bit b of h's bytes.
  static __device__ __forceinline__ unsigned five(unsigned v, unsigned h, int nb, int b) {
    return ((v >> nb) & 0x0F0F0F0Fu) | (((h >> b) << 4) & 0x10101010u);
  }
  // Steps 0, 1 the low nibbles (sub-block 2jj), 2, 3 the high ones.
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, int jj, unsigned (&o)[8]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const unsigned lo = five(i ? wd.w23 : wd.w01, i ? wd.h23 : wd.h01, 0, 2 * jj), ul = lo >> 16;
      const unsigned hi = five(i ? wd.w23 : wd.w01, i ? wd.h23 : wd.h01, 4, 2 * jj + 1), uh = hi >> 16;
      o[2 * i] = pack_bf16x2(sc.fl * (mag(lo, 0xFFu) - 8388608.f) - sc.ol, sc.fl8 * (mag(lo, 0xFF00u) - 8388608.f) - sc.ol);
      o[2 * i + 1] = pack_bf16x2(sc.fl * (mag(ul, 0xFFu) - 8388608.f) - sc.ol, sc.fl8 * (mag(ul, 0xFF00u) - 8388608.f) - sc.ol);
      o[4 + 2 * i] = pack_bf16x2(sc.fh * (mag(hi, 0xFFu) - 8388608.f) - sc.oh, sc.fh8 * (mag(hi, 0xFF00u) - 8388608.f) - sc.oh);
      o[5 + 2 * i] = pack_bf16x2(sc.fh * (mag(uh, 0xFFu) - 8388608.f) - sc.oh, sc.fh8 * (mag(uh, 0xFF00u) - 8388608.f) - sc.oh);
    }
  }
};

// Q5_K with f16 operands: q4_k's f16 form with the fifth bit or'ed in
// beside each nibble (the five bits at 0-4 of each f16 half, so the high
// nibbles take the low ones' factors: sc, not sc / 16): sc q, exact (at
// most 63 x 31), then d sc q - dmin m, one f16 rounding.
template <> struct QA<QT_Q5_K_F16_H> : QA<QT_Q5_K_H> {
  static constexpr bool F16 = true;
  // Staged as q4_k's f16 form: (sc, sc), (-1024 sc, ..) of the low
  // nibbles, the same of the high ones, (d, d), (-dmin m, ..) low and high.
  // (One function with q4_k's, its high factors a template choice, changed
  // the register allocation of q4_k's default instantiations: kept apart.)
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    unsigned sc, m;
    sub(hd, j, sc, m);
    const float dmin = f16_bits_h((unsigned short)(hd.dd >> 16));
    const float sl = (float)(sc & 0xFF), shi = (float)(sc >> 8);
    const unsigned d2 = (hd.dd & 0xFFFF) * 0x10001u;
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "r"(pack_f16(sl, sl)), "r"(pack_f16(-1024.f * sl, -1024.f * sl)),
                 "r"(pack_f16(shi, shi)), "r"(pack_f16(-1024.f * shi, -1024.f * shi))
                 : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(sa + 16), "r"(d2), "r"(pack_f16(-dmin * (float)(m & 0xFF), -dmin * (float)(m & 0xFF))),
                 "r"(pack_f16(-dmin * (float)(m >> 8), -dmin * (float)(m >> 8))), "r"(0u)
                 : "memory");
  }
  using Scales = QA<QT_Q4_K_F16_H>::Scales;
  static __device__ __forceinline__ Scales scales(unsigned sa) { return QA<QT_Q4_K_F16_H>::scales(sa); }
  // Words: as q4_k's f16 form, x[i] the lane's two qs bytes of the u16 at
  // bytes 8i + 2tq4 moved to bytes 0 and 2, h[i] the qh bytes so.
  struct Words {
    unsigned x[4], h[4];
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    const unsigned sp = 0x4140u + 0x0202u * ((sel >> 1) & 1);
    Words r;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      r.x[i] = __byte_perm(ld_shared4(q + 8 * i), 0, sp);
      r.h[i] = __byte_perm(ld_shared4(q + 2048 + 8 * i), 0, sp);
    }
    return r;
  }
  // h2: the f16 pair of five-bit values f (at bits 0-4 of each half) as d
  // sc f - dmin m.
  static __device__ __forceinline__ unsigned h2(unsigned f, unsigned s, unsigned c, unsigned d, unsigned o) {
    unsigned n;
    asm("lop3.b32 %0, %1, %2, %3, 0xFE;" : "=r"(n) : "r"(f), "r"(0u), "r"(0x64006400u));  // f | 0x6400: 1024 + f
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(n) : "r"(n), "r"(s), "r"(c));               // sc f, exact
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(n) : "r"(n), "r"(d), "r"(o));
    return n;
  }
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, int jj, unsigned (&o)[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const unsigned lo = (wd.x[i] & 0x000F000Fu) | (((wd.h[i] >> (2 * jj)) << 4) & 0x00100010u);
      const unsigned hi = ((wd.x[i] >> 4) & 0x000F000Fu) | (((wd.h[i] >> (2 * jj + 1)) << 4) & 0x00100010u);
      o[i] = h2(lo, sc.sl, sc.cl, sc.d, sc.ol);
      o[4 + i] = h2(hi, sc.sh, sc.ch, sc.d, sc.oh);
    }
  }
};

// Q6_K: stage j = kb % 4 of a 256-element block is its columns 64j ..
// 64j + 63, in half h = j / 2 of the block, nibble p = j % 2: column c's
// six bits are nibble p of ql[64h + c] and bits 4p + 2 (c / 32) of
// qh[32h + c % 32], the value those minus 32 times d * sc[4j + c / 16]
// (QD<QT_Q6_K>'s expression, (d * sc) * (q - 32)). A stage's quant bytes
// (QB 96 a row) are three TMA boxes of 64 rows x 32 bytes (BOX): ql[64h
// ..+32], ql[64h + 32 ..+32] and qh[32h ..+32], one after the other, so a
// 64-row group holds 6 KiB and a row's bytes are 32 apart in each box
// (q_words_at). Stages 2h and 2h + 1 bring the same bytes (their nibbles
// differ; the second from L2). frag takes the stage's index jj in its
// block (staged_frags), whose parity is p. The staged scales: the four
// k16 steps' d * sc and their 2^-8 multiples.
template <> struct QA<QT_Q6_K_H> {
  static constexpr int QB = 96, SC = 32, HDR_KB = 4, BOX = 32, NBOX = 3;
  static constexpr bool F16 = false;
  // qcol_box: box i's first byte column in the quant rows' tensor map
  // (208-byte bodies) at stage kb.
  static __device__ __forceinline__ int qcol_box(int kb, int i) {
    const int base = (kb >> 2) * 208, h = (kb >> 1) & 1;
    return base + (i < 2 ? 64 * h + 32 * i : 128 + 32 * h);
  }
  struct Hdr {
    uint4 sc;          // int8 scales[16]
    unsigned short d;  // f16 d
  };
  static __device__ __forceinline__ const unsigned char* scale_base(const unsigned char* w, long long wrows, int K) {
    return w + align256h(wrows * (K / 256) * 208);
  }
  static __device__ __forceinline__ Hdr hdr(const unsigned char* w, const unsigned char* sb, long long grow, int K, int b) {
    const long long bi = grow * (K / 256) + b;
    return Hdr{ldg_v4(w + bi * 208 + 192), ldg_u16(sb + 2 * bi)};
  }
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    const unsigned w4 = j == 0 ? hd.sc.x : j == 1 ? hd.sc.y : j == 2 ? hd.sc.z : hd.sc.w;  // scales 4j .. 4j + 3
    const float d = f16_bits_h(hd.d);
    float f[4];
#pragma unroll
    for (int s = 0; s < 4; s++) f[s] = d * (float)(int)(signed char)((w4 >> (8 * s)) & 0xFF);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "f"(f[0]), "f"(f[0] * 0x1p-8f), "f"(f[1]), "f"(f[1] * 0x1p-8f) : "memory");
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sa + 16), "f"(f[2]), "f"(f[2] * 0x1p-8f), "f"(f[3]), "f"(f[3] * 0x1p-8f)
                 : "memory");
  }
  struct Scales {
    float f[8];  // step s: f[2s] = d * sc, f[2s + 1] its 2^-8 multiple
  };
  static __device__ __forceinline__ Scales scales(unsigned sa) {
    Scales r;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.f[0]), "=f"(r.f[1]), "=f"(r.f[2]), "=f"(r.f[3]) : "r"(sa));
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.f[4]), "=f"(r.f[5]), "=f"(r.f[6]), "=f"(r.f[7]) : "r"(sa + 16));
    return r;
  }
  // Words: step s's ql bytes at columns 16s + 2tq4 (+1) and those + 8
  // (l[s], as q8_0's words), and the qh bytes of columns 2tq4 (+1), 8 +
  // 2tq4 (+1) (h[0]) and those + 16 (h[1]), which steps 2 and 3 share
  // with 0 and 1. q is q_words_at's offset of the row in its group.
  struct Words {
    unsigned l[4], h[2];
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned sel) {
    Words r;
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const unsigned a = q + (s >> 1) * 2048 + 16 * (s & 1);
      r.l[s] = __byte_perm(ld_shared4(a), ld_shared4(a + 8), sel);
    }
#pragma unroll
    for (int s = 0; s < 2; s++) r.h[s] = __byte_perm(ld_shared4(q + 4096 + 16 * s), ld_shared4(q + 4096 + 16 * s + 8), sel);
    return r;
  }
  // six: step s's four six-bit values q, a byte each (nibble p, the high
  // bits at 4p + 2 (s / 2) moved to bits 4-5).
  static __device__ __forceinline__ unsigned six(const Words& wd, int p, int s) {
    const int ls = 4 * p;
    const unsigned hi = ((wd.h[s & 1] >> (ls + 2 * (s >> 1))) << 4) & 0x30303030u;
    return ((wd.l[s] >> ls) & 0x0F0F0F0Fu) | hi;
  }
  // mag's 2^23 + 32 and 2^23 + 32 * 256 off give q - 32 exactly (times
  // 256 for a second byte, which f[2s + 1]'s 2^-8 undoes).
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, int jj, unsigned (&o)[8]) {
    const int p = jj & 1;
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const unsigned v = six(wd, p, s), u = v >> 16;
      const float f = sc.f[2 * s], f8 = sc.f[2 * s + 1];
      o[2 * s] = pack_bf16x2(f * (mag(v, 0xFFu) - 8388640.f), f8 * (mag(v, 0xFF00u) - 8396800.f));
      o[2 * s + 1] = pack_bf16x2(f * (mag(u, 0xFFu) - 8388640.f), f8 * (mag(u, 0xFF00u) - 8396800.f));
    }
  }
};

// Q6_K with f16 operands: a six-bit q under an f16 1024 (a PRMT with 0x64
// bytes) is 1024 + q exactly, 1056 off gives q - 32, and one multiply by
// the step's d * sc rounded to f16: each weight within two f16 roundings
// of the float dequantisation.
template <> struct QA<QT_Q6_K_F16_H> : QA<QT_Q6_K_H> {
  static constexpr bool F16 = true;
  // Staged: each k16 step's d * sc as an f16 pair (16 of SC's 32 bytes).
  static __device__ __forceinline__ void put_scales(unsigned sa, const Hdr& hd, int j) {
    const unsigned w4 = j == 0 ? hd.sc.x : j == 1 ? hd.sc.y : j == 2 ? hd.sc.z : hd.sc.w;
    const float d = f16_bits_h(hd.d);
    unsigned h[4];
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const float f = d * (float)(int)(signed char)((w4 >> (8 * s)) & 0xFF);
      h[s] = pack_f16(f, f);
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "r"(h[0]), "r"(h[1]), "r"(h[2]), "r"(h[3]) : "memory");
  }
  struct Scales {
    unsigned h[4];
  };
  static __device__ __forceinline__ Scales scales(unsigned sa) {
    Scales r;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(r.h[0]), "=r"(r.h[1]), "=r"(r.h[2]), "=r"(r.h[3]) : "r"(sa));
    return r;
  }
  static __device__ __forceinline__ unsigned h2(unsigned v, unsigned sel, unsigned d) {
    unsigned n = __byte_perm(v, 0x64646464u, sel);
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(n) : "r"(n), "r"(0xE420E420u));  // -1056: q - 32, exact
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(n) : "r"(n), "r"(d));
    return n;
  }
  static __device__ __forceinline__ void frag(const Words& wd, const Scales& sc, int jj, unsigned (&o)[8]) {
    const int p = jj & 1;
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const unsigned v = six(wd, p, s);
      o[2 * s] = h2(v, 0x4140u, sc.h[s]);
      o[2 * s + 1] = h2(v, 0x4342u, sc.h[s]);
    }
  }
};

// BF16: no quantisation; a stage is the rows' 64 bf16 weights (128
// bytes), TMA-loaded in the 128-byte swizzle (16-byte chunk c of row r at
// c ^ (r % 8), which spreads a fragment's 8 rows over all banks), and the
// A fragments are those words as they are: no scales (SC 0), nothing for
// the producer to stage. words takes q_words_at's offset, row * 128 +
// 4 tq4 from the stage's 1 KiB-aligned quant bytes: bits 7-9 are the
// row's swizzle.
template <> struct QA<QT_BF16_H> {
  static constexpr int QB = 128, SC = 0, HDR_KB = 1;
  static constexpr bool F16 = false;
  static __device__ __forceinline__ int qcol(int kb) { return kb * 64; }  // elements (the map's are bf16)
  struct Hdr {};
  static __device__ __forceinline__ const unsigned char* scale_base(const unsigned char* w, long long, int) { return w; }
  static __device__ __forceinline__ Hdr hdr(const unsigned char*, const unsigned char*, long long, int, int) { return Hdr{}; }
  static __device__ __forceinline__ void put_scales(unsigned, const Hdr&, int) {}
  struct Scales {};
  static __device__ __forceinline__ Scales scales(unsigned) { return Scales{}; }
  struct Words {
    unsigned w[8];
  };
  static __device__ __forceinline__ Words words(unsigned q, unsigned) {
    const unsigned base = q & ~127u, r7 = (q >> 7) & 7, lo = q & 12;  // lo: 4 tq4
    Words r;
#pragma unroll
    for (int s = 0; s < 8; s++) r.w[s] = ld_shared4(base + ((((unsigned)s) ^ r7) << 4) + lo);  // chunk s: k 8s + 2 tq4
    return r;
  }
  static __device__ __forceinline__ void frag(const Words& wd, const Scales&, unsigned (&o)[8]) {
#pragma unroll
    for (int s = 0; s < 8; s++) o[s] = wd.w[s];
  }
};

// q_words_at is the offset of a row's words a lane reads in a stage's
// quant bytes (words_at; BF16: the row and 4 tq4, its swizzle applied in
// QA<QT_BF16_H>::words).
template <int QT> __device__ __forceinline__ unsigned q_words_at(int row, int tq4) {
  if constexpr (QT == QT_BF16_H) {
    return row * 128 + 4 * tq4;
  } else if constexpr (boxed_qt<QT>) {  // groups of 64 rows, each NBOX boxes of BOX-byte rows
    return (row >> 6) * 64 * QA<QT>::QB + (row & 63) * QA<QT>::BOX + 4 * (tq4 >> 1);
  } else {
    return words_at(row, QA<QT>::QB, tq4);
  }
}

// staged_frags: a boxed type's A fragments of a stage's rows ra (words at
// qa, scales at sa) and rb (qb, sb) into fa and fb; j is the consumer's
// stage counter, which is the stage's index in its block modulo 4 (a tile
// starts at a multiple of K / 64 stages, itself a multiple of 4).
template <int QT>
__device__ __forceinline__ void staged_frags(unsigned sq, unsigned qa, unsigned qb, unsigned sel, unsigned sa, unsigned sb, int j,
                                             unsigned (&fa)[8], unsigned (&fb)[8]) {
  using Q = QA<QT>;
  Q::frag(Q::words(sq + qa, sel), Q::scales(sa), j & 3, fa);
  Q::frag(Q::words(sq + qb, sel), Q::scales(sb), j & 3, fb);
}

// q_boxes: a stage's quant bytes of NC x 64 weight rows, boxes of 64 rows
// (SwiGLU: the gate rows from r0, then as many up rows from r1; else all
// from r0), for k-block kb.
template <int QT, int EPI, int NC>
__device__ __forceinline__ void q_boxes(unsigned sq, const TmaMap* tq, int kb, int r0, int r1, unsigned fb) {
  constexpr int QB = QA<QT>::QB;
  if constexpr (boxed_qt<QT>) {
#pragma unroll
    for (int i = 0; i < NC; i++) {
      const int row = EPI == 2 ? (i < NC / 2 ? r0 + 64 * i : r1 + 64 * (i - NC / 2)) : r0 + 64 * i;
#pragma unroll
      for (int b = 0; b < QA<QT>::NBOX; b++) tma_load_2d(sq + 64 * i * QB + 64 * QA<QT>::BOX * b, tq, QA<QT>::qcol_box(kb, b), row, fb);
    }
  } else {
    const int qc = QA<QT>::qcol(kb);
#pragma unroll
    for (int i = 0; i < NC; i++) {
      const int row = EPI == 2 ? (i < NC / 2 ? r0 + 64 * i : r1 + 64 * (i - NC / 2)) : r0 + 64 * i;
      tma_load_2d(sq + 64 * i * QB, tq, qc, row, fb);
    }
  }
}

// ScaleRows: the rows whose scales a producer thread stages for the
// consumers: rows tid + 128 i of a stage's NC x 64 (SwiGLU: the gate rows
// from r0, then the up rows from r1). load brings a row's header every
// HDR_KB stages, before the producer waits for the stage's slot, so the
// wait covers the load.
template <int QT, int EPI, int NC> struct ScaleRows {
  static constexpr int R = NC / 2;
  long long grow[R];
  typename QA<QT>::Hdr h[R];
  __device__ __forceinline__ void tile(long long wrows, long long r0, long long r1) {
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int i = 0; i < R; i++) {
      const int r = tid + 128 * i;
      grow[i] = min(EPI == 2 ? (r < 32 * NC ? r0 + r : r1 + r - 32 * NC) : r0 + r, wrows - 1);
    }
  }
  __device__ __forceinline__ void load(const unsigned char* w, const unsigned char* sb, int K, int kb) {
    if (kb % QA<QT>::HDR_KB == 0) {
#pragma unroll
      for (int i = 0; i < R; i++) h[i] = QA<QT>::hdr(w, sb, grow[i], K, kb / QA<QT>::HDR_KB);
    }
  }
  __device__ __forceinline__ void stage(unsigned ssc, int kb) const {
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int i = 0; i < R; i++) QA<QT>::put_scales(ssc + (tid + 128 * i) * QA<QT>::SC, h[i], kb % QA<QT>::HDR_KB);
  }
};

// CTAS: 1, or 2 CTAs a multiprocessor (half the shared memory and the
// registers each), so that one CTA's waits (the stage's data, its MMAs)
// overlap the other's work. The launch bounds give every thread 168
// registers, or 80 with 2 CTAs (token tiles of up to 96 rows, lower's
// hopperQShape), or 96 with NC 4 (its choice); setmaxnreg then moves the
// producer's spare ones to the consumers, and ptxas compiles each role's
// code after it for that role's count (the 2-CTA kernel's consumers use
// up to R93 of their 104). The producer keeps 32 with 2 CTAs (its
// ScaleRows; 128 x 32 + 256 x 104 = 384 x 80).
template <int CTAS> struct QCfg;
template <> struct QCfg<1> {
  static constexpr int SMEM = 200 * 1024, PRODUCER_REGS = 40, CONSUMER_REGS = 232;
};
template <> struct QCfg<2> {
  static constexpr int SMEM = 110 * 1024, PRODUCER_REGS = 32, CONSUMER_REGS = 104;
};

// wg_rs_k64: a stage's four k16 MMAs of m64nNk16 with A from fa, fb (the
// two fragment rows' dequantised weights).
template <int N, bool H, int R>
__device__ __forceinline__ void wg_rs_k64(float (&acc)[R], const unsigned (&fa)[8], const unsigned (&fb)[8], unsigned long long db,
                                          int kb) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    const unsigned a[4] = {fa[2 * kk], fb[2 * kk], fa[2 * kk + 1], fb[2 * kk + 1]};
    wgmma_rs_n<N, H>(acc, a, db + 2 * kk, kb > 0 || kk > 0);  // + 2 a k16 step: 32 bytes, in 16-byte units
  }
}
// wg_rs_rows: the stage's MMAs as wide as the tile's rows rounded up to
// VN (0: always BN). An expert of a 2048-token chunk has about 80 tokens
// for 96-row tiles; the accumulators past N keep what they held, and the
// epilogue stores no column at or past rows. COMMIT commits them as a
// group in the width's own branch: ptxas ends a group at the end of each
// branch anyway, so a commit after the join makes an empty group there
// (an HGMMA of RZ), and a wait_group 1 would leave that one pending and
// wait for the MMAs (gemm_wgmma_q's PIPE). A pipelined loop of its own
// for each width, chosen once a tile, made ptxas serialise the MMAs
// (C7512, insufficient register resources; even two copies of one width,
// at 168 registers).
template <int BN, int VN, bool COMMIT = false, bool H = false, int N = (VN > 0 ? VN : BN), int R>
__device__ __forceinline__ void wg_rs_rows(float (&acc)[R], const unsigned (&fa)[8], const unsigned (&fb)[8], unsigned long long db,
                                           int kb, int rows) {
  if constexpr (N >= BN) {
    wg_rs_k64<BN, H>(acc, fa, fb, db, kb);
    if constexpr (COMMIT) wg_commit();
  } else {
    if (rows <= N) {
      wg_rs_k64<N, H>(acc, fa, fb, db, kb);
      if constexpr (COMMIT) wg_commit();
    } else {
      wg_rs_rows<BN, VN, COMMIT, H, N + VN>(acc, fa, fb, db, kb, rows);
    }
  }
}

// out_val: v as an output of type T; f16 saturates (the gate+up's output,
// the down GEMM's input, of the _F16_H types).
template <typename T> __device__ __forceinline__ T out_val(float v) { return from_f32<T>(v); }
template <> __device__ __forceinline__ half_t out_val<half_t>(float v) { return half_t{(unsigned short)(f16x2_sat(v, 0.f) & 0xFFFF)}; }

// IsBF16: whether an output type is bf16 (gemm_wgmma_q's staged stores
// round to it).
template <typename T> struct IsBF16 {
  static constexpr bool value = false;
};
template <> struct IsBF16<bf16_t> {
  static constexpr bool value = true;
};

template <typename TY, int QT, int BN, int EPI, int GROUPED, int CTAS, int NC, int VN, int PIPE>
__global__ void __launch_bounds__(128 * (NC + 1), CTAS) gemm_wgmma_q(const __grid_constant__ TmaMap tx, const __grid_constant__ TmaMap tq,
                                                       const unsigned char* __restrict__ w, long long wrows, int row0, int T,
                                                       int N, int K, TY* __restrict__ y, int up_row,
                                                       const int4* __restrict__ tiles, const int* __restrict__ ntiles,
                                                       int expert_rows) {
  pdl_wait();
  static_assert(NC == 2 || (NC == 4 && CTAS == 1), "2 consumer warpgroups, or 4 in one CTA a multiprocessor");
  static_assert(VN == 0 || (VN % 8 == 0 && BN % VN == 0), "token steps of a multiple of 8 rows dividing the tile");
  constexpr int QB = QA<QT>::QB, SC = QA<QT>::SC;
  // A stage: the token tile, the rows' quant bytes, their staged scales.
  constexpr int X_BYTES = BN * 128, Q_BYTES = 64 * NC * QB, STAGE = X_BYTES + Q_BYTES + 64 * NC * SC;
  // XSTORE: plain bf16 stores (EPI 0) leave through a 512-byte staging
  // area a consumer warp after the stages (ST stages take what the budget
  // leaves it with two CTAs a multiprocessor; lower.hopperQSmem agrees).
  // Not EPI 1 (its sum is rounded once), nor SwiGLU's (EPI 2: staged the
  // same way, 32 tokens x a warp's 8 features, prefill was 1% slower than
  // with EPI 0's alone, docs/PERF.md).
  constexpr bool XSTORE = EPI == 0 && IsBF16<TY>::value;
  constexpr int EPI_STAGE = XSTORE ? 512 * 4 * NC : 0;
  static_assert(!XSTORE || BN % 16 == 0, "the staged epilogue takes 16 tokens at a time");
  constexpr int BUDGET = QCfg<CTAS>::SMEM - (CTAS == 2 ? EPI_STAGE : 0);
  constexpr int ST = BUDGET / STAGE < 8 ? BUDGET / STAGE : 8;
  constexpr int FW = EPI == 2 ? 32 * NC : 64 * NC;  // output features per CTA
  // 4 consumers: what 640 threads' 96 registers leave them beside a
  // producer of 40 (128 x 40 + 512 x 104 <= 640 x 96), or with PIPE of 32
  // (128 x 32 + 512 x 112 = 640 x 96; at 24 q4_k's ScaleRows spill).
  constexpr int PRODUCER_REGS = NC == 4 && PIPE ? 32 : QCfg<CTAS>::PRODUCER_REGS;
  constexpr int CONSUMER_REGS = NC == 4 ? (PIPE ? 112 : 104) : QCfg<CTAS>::CONSUMER_REGS;
  static_assert(NC != 4 || 128 * PRODUCER_REGS + 512 * CONSUMER_REGS <= 640 * 96, "setmaxnreg beyond the CTA's registers");
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long full_bar[ST], empty_bar[ST];
  unsigned char* smem = (unsigned char*)(((unsigned long long)smem_raw + 1023) & ~1023ull);
  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < ST; s++) {
      mbar_init(smem_u32(&full_bar[s]), 1 + 128);  // the TMA's expect_tx, each producer thread's scales
      mbar_init(smem_u32(&empty_bar[s]), 128 * NC);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // Token tiles (of BN) are the "row tiles" here; feature tiles of FW.
  const int tilesT = GROUPED ? ntiles[0] : (T + BN - 1) / BN, tilesF = (N + FW - 1) / FW, ntile = tilesT * tilesF;
  const int nk = K / 64;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
    const unsigned char* sb = QA<QT>::scale_base(w, wrows, K);
    ScaleRows<QT, EPI, NC> sr;
    int it = 0;
    for (int t = blockIdx.x; t < ntile; t += gridDim.x) {
      const RowTile rt = row_tile_n<GROUPED, BN>(tile_row<GROUPED>(t, tilesT, tilesF), T, tiles, expert_rows, row0);
      const int f0 = tile_band<GROUPED>(t, tilesT, tilesF) * FW;
      const int r0 = rt.wrow + f0, r1 = up_row + rt.wrow + f0;
      sr.tile(wrows, r0, r1);
      for (int kb = 0; kb < nk; kb++, it++) {
        const int s = it % ST;
        sr.load(w, sb, K, kb);
        mbar_wait(smem_u32(&empty_bar[s]), ((it / ST) & 1) ^ 1);
        const unsigned sx = smem_u32(smem + s * STAGE), sq = sx + X_BYTES, fb = smem_u32(&full_bar[s]);
        if (tid == 0) {
          mbar_expect_tx(fb, X_BYTES + Q_BYTES);
          tma_load_2d(sx, &tx, kb * 64, rt.m0, fb);
          q_boxes<QT, EPI, NC>(sq, &tq, kb, r0, r1, fb);
        }
        sr.stage(sq + Q_BYTES, kb);
        mbar_arrive(fb);  // release: the consumers' wait sees the scales
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
  const int c = wg - 1, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq4 = lane & 3;
  // This thread's A rows are its fragment rows ra (stage quant row qa) and
  // rb (qb), dequantised into the MMA's registers with the scales the
  // producer staged for them.
  const int la = EPI == 2 ? 32 * c + 8 * warp + g : 64 * c + 16 * warp + g;
  const int qa = la, qb = EPI == 2 ? 32 * NC + la : la + 8;
  const unsigned qw = q_words_at<QT>(qa, tq4), wsel = words_sel(tq4), sbase = smem_u32(smem);
  const unsigned qw6 = q_words_at<QT>(qb, tq4);  // rb's (a boxed type's rows are not QB apart)
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; i++) acc[i] = 0.f;
  // dq: stage j's A fragments (rows ra, rb) into xa, xb once its data
  // has landed; mma: stage j's four k16 steps on them, as wide as the
  // tile's rows (wg_rs_rows), one commit group.
  auto dq = [&](int j, unsigned (&xa)[8], unsigned (&xb)[8]) {
    const int s = j % ST;
    mbar_wait(smem_u32(&full_bar[s]), (j / ST) & 1);
    const unsigned sq = sbase + s * STAGE + X_BYTES, ssc = sq + Q_BYTES;
    if constexpr (boxed_qt<QT>) {
      staged_frags<QT>(sq, qw, qw6, wsel, ssc + qa * SC, ssc + qb * SC, j, xa, xb);
    } else {
      QA<QT>::frag(QA<QT>::words(sq + qw, wsel), QA<QT>::scales(ssc + qa * SC), xa);
      QA<QT>::frag(QA<QT>::words(sq + qw + (qb - qa) * QB, wsel), QA<QT>::scales(ssc + qb * SC), xb);
    }
  };
  auto mma = [&](int j, bool first, const unsigned (&xa)[8], const unsigned (&xb)[8], int rows) {
    wg_fence();
    const unsigned long long db = wg_desc(sbase + (j % ST) * STAGE);  // + 2 a k16 step: 32 bytes, in 16-byte units
    wg_rs_rows<BN, VN, true, QA<QT>::F16>(acc, xa, xb, db, first ? 0 : 1, rows);
  };
  int it = 0;
  for (int t = blockIdx.x; t < ntile; t += gridDim.x) {
    const RowTile rt = row_tile_n<GROUPED, BN>(tile_row<GROUPED>(t, tilesT, tilesF), T, tiles, expert_rows, row0);
    const int f0 = tile_band<GROUPED>(t, tilesT, tilesF) * FW;
    wg_pin(acc);
    if constexpr (PIPE) {
      // Two register sets: stage kb + 1 is dequantised into one while
      // stage kb's MMAs run on the other; a set is written again only
      // after wg_wait<1> has retired the MMAs that read it, and a stage's
      // slot is released then too.
      unsigned a0[8], b0[8], a1[8], b1[8];
      dq(it, a0, b0);
#pragma unroll 1
      for (int kb = 0; kb < nk; kb += 2) {
        mma(it + kb, kb == 0, a0, b0, rt.rows);
        if (kb > 0) {
          wg_wait<1>();
          mbar_arrive(smem_u32(&empty_bar[(it + kb - 1) % ST]));
        }
        if (kb + 1 >= nk) break;
        dq(it + kb + 1, a1, b1);
        mma(it + kb + 1, false, a1, b1, rt.rows);
        wg_wait<1>();
        mbar_arrive(smem_u32(&empty_bar[(it + kb) % ST]));
        if (kb + 2 < nk) dq(it + kb + 2, a0, b0);
      }
      wg_wait<0>();
      mbar_arrive(smem_u32(&empty_bar[(it + nk - 1) % ST]));
      it += nk;
    } else {
#pragma unroll 1
      for (int kb = 0; kb < nk; kb++, it++) {
        const int s = it % ST;
        mbar_wait(smem_u32(&full_bar[s]), (it / ST) & 1);
        const unsigned sx = sbase + s * STAGE, sq = sx + X_BYTES, ssc = sq + Q_BYTES;
        unsigned fa[8], fb[8];
        if constexpr (boxed_qt<QT>) {
          staged_frags<QT>(sq, qw, qw6, wsel, ssc + qa * SC, ssc + qb * SC, it, fa, fb);
        } else {
          QA<QT>::frag(QA<QT>::words(sq + qw, wsel), QA<QT>::scales(ssc + qa * SC), fa);
          QA<QT>::frag(QA<QT>::words(sq + qw + (qb - qa) * QB, wsel), QA<QT>::scales(ssc + qb * SC), fb);
        }
        wg_fence();
        wg_rs_rows<BN, VN, true, QA<QT>::F16>(acc, fa, fb, wg_desc(sx), kb, rt.rows);  // committed in the width's branch: no empty group
        // Wait for them at once: the MMAs read fa and fb while they run
        // and the next stage rewrites them, so no MMA may stay in flight
        // past here. The other warpgroups on the multiprocessor fill the
        // wait.
        wg_wait<0>();
        mbar_arrive(smem_u32(&empty_bar[s]));
      }
    }
    wg_pin(acc);

    // Epilogue: acc register i of chunk j = i/4 is fragment row
    // (i/2 & 1) ? rb : ra, token column 8j + 2*tq4 + (i&1) of the tile.
    const int fa_out = f0 + (EPI == 2 ? 32 * c + 8 * warp + g : 64 * c + 16 * warp + g);
    if constexpr (XSTORE) {
      // A token's 16 features of the warp were 2-byte stores 4 tokens an
      // instruction (the down GEMM's stores cost about 20% of its time at
      // S-2.1, docs/PERF.md). Instead stmatrix .trans writes 16 tokens x
      // the warp's 16 features (chunks 2jj, 2jj + 1: ra and rb of each,
      // an 8 x 8 matrix each) to the staging area as token rows of 32
      // bytes, and each lane stores 16 bytes of one of them: the same
      // rounding (cvt.rn to bf16), the same bits. Needs N a multiple of 8
      // (a lane's 8 features all in or all out) and y 16-byte aligned (the
      // plan's buffers are; a caller's view need not be).
      if (N % 8 == 0 && (reinterpret_cast<unsigned long long>(y) & 15) == 0) {
        const unsigned stg = sbase + ST * STAGE + (c * 4 + warp) * 512;
        const int mk = lane >> 3;
        const unsigned sta = stg + (((mk >> 1) * 8 + (lane & 7)) * 32 + (mk & 1) * 16);
        const int f = f0 + 64 * c + 16 * warp + 8 * (lane & 1);
#pragma unroll
        for (int jj = 0; jj < BN / 16; jj++) {
          asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(sta),
                       "r"(pack_bf16x2(acc[8 * jj], acc[8 * jj + 1])), "r"(pack_bf16x2(acc[8 * jj + 2], acc[8 * jj + 3])),
                       "r"(pack_bf16x2(acc[8 * jj + 4], acc[8 * jj + 5])), "r"(pack_bf16x2(acc[8 * jj + 6], acc[8 * jj + 7]))
                       : "memory");
          __syncwarp();
          uint4 v;
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(stg + 16 * lane));
          const int tok = 16 * jj + (lane >> 1);
          if (tok < rt.rows && f < N) *reinterpret_cast<uint4*>(y + (long long)(rt.m0 + tok) * N + f) = v;
          __syncwarp();
        }
        continue;
      }
    }
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
      for (int q = 0; q < 2; q++) {
        const int tok = 8 * j + 2 * tq4 + q;
        if (tok >= rt.rows) continue;
        const long long yrow = (long long)(rt.m0 + tok) * N;
        const float va = acc[4 * j + q], vb = acc[4 * j + 2 + q];
        if constexpr (EPI == 2) {
          if (fa_out < N) y[yrow + fa_out] = out_val<TY>(silu_h(va) * vb);
        } else {
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int f = fa_out + 8 * h;
            if (f >= N) continue;
            float v = h ? vb : va;
            if constexpr (EPI == 1) v += to_f32(y[yrow + f]);
            y[yrow + f] = from_f32<TY>(v);
          }
        }
      }
  }
}
