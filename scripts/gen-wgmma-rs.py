#!/usr/bin/env python3
# gen-wgmma-rs.py: prints gemm_hopper.cu's wgmma_rs_m64nN (A from registers, N = 8..128;
# H: f16 operands, else bf16) and wgmma_rs_n, the block after the comment
# "// wgmma with A from registers" up to WgCfg. Each N's asm is written once, as a
# macro of the operand type.
out=[]
for n in range(8,129,8):
    r=n//2
    regs=", ".join(f"%{i}" for i in range(r))
    cons=", ".join(f'"+f"(d[{i}])' for i in range(r))
    out.append(f'''#define WGMMA_RS_M64N{n}(T) \\
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r+5}, 0;\\n" \\
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32." T "." T " {{{regs}}}, {{%{r}, %{r+1}, %{r+2}, %{r+3}}}, %{r+4}, p, 1, 1, 0;\\n}}\\n" \\
               : {cons} \\
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accum))
template <bool H, int R> __device__ __forceinline__ void wgmma_rs_m64n{n}(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {{
  if constexpr (H)
    WGMMA_RS_M64N{n}("f16");
  else
    WGMMA_RS_M64N{n}("bf16");
}}
#undef WGMMA_RS_M64N{n}''')
print("\n".join(out))
print('''
// wgmma_rs_n: m64nNk16 for N a multiple of 8 up to 128 on the first N / 2
// accumulators of d; H: f16 operands, else bf16.
template <int N, bool H = false, int R> __device__ __forceinline__ void wgmma_rs_n(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int accum) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 128 && R >= N / 2, "m64nNk16: N a multiple of 8 in [8, 128], N / 2 accumulators");''')
for n in range(8,129,8):
    kw = "if constexpr" if n==8 else "else if constexpr"
    print(f"  {kw} (N == {n})\n    wgmma_rs_m64n{n}<H>(d, a, db, accum);")
print("}")
