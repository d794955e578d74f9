package lower

import "fmt"

// CublasLtGEMM is the Kernel of a Launch that cuBLASLt runs instead of a
// kernel of ours: y [T, N] (+)= x [T, K] w^T, x and w bf16 row-major, f32
// accumulation, y bf16 or f32 (DTypes[0]). Args: T, N, K (i32), x, w, y,
// accumulate (i32 0 or 1). lower plans it only with Options.CublasLt (the
// executor found the library), for the plain prefill GEMMs where it was
// measured faster than gemm_wgmma (docs/PERF.md: BenchmarkGEMMHopper's
// cublaslt rows); without the library nothing changes.
const CublasLtGEMM = "cublaslt_gemm"

// CublasLtName is how a CublasLtGEMM launch into y of dtype yt is named
// in plans, traces and errors: cublaslt_gemm<bf16>.
func CublasLtName(yt string) string { return CublasLtGEMM + "<" + yt + ">" }

// CublasLtMinRows: from this many rows the plain bf16 GEMMs go to
// cuBLASLt. H200, BenchmarkGEMMShortChunk (docs/PERF.md), TFLOP/s of
// gemm_wgmma against cuBLASLt at T = 128 / 256 / 512 / 1024: the router's
// 256 columns (f32 out) 10 / 21 / 41 / 82 against 17 / 31 / 76 / 203 (its
// 128-row tiles leave most multiprocessors idle), o_proj 157 / 312 / 606 /
// 618 against 312 / 541 / 714 / 766, dense down alike, the shared down 71
// / 147 / 230 / 402 against 60 / 173 / 337 / 496: cuBLASLt from 256 rows
// at all four (it was 1024, not a measured crossover).
const CublasLtMinRows = 256

// cublasLtOK says why a does not go to cuBLASLt, or nil.
func cublasLtOK(a MatMulArgs) error {
	switch {
	case !a.CublasLt:
		return fmt.Errorf("cuBLASLt not in use")
	case a.Split != nil:
		return fmt.Errorf("split outputs (the wgmma GEMM's epilogue)")
	case a.CC < 90:
		return fmt.Errorf("compute capability %d.%d (cuBLASLt measured on 9.0 only)", a.CC/10, a.CC%10)
	case a.T < CublasLtMinRows:
		return fmt.Errorf("%d rows (cuBLASLt from %d)", a.T, CublasLtMinRows)
	case a.SwiGLU:
		return fmt.Errorf("no SwiGLU epilogue in cuBLASLt")
	case a.XType != "bf16" || a.WType != "bf16":
		return fmt.Errorf("x and w are %s and %s (bf16 only)", a.XType, a.WType)
	case !a.X.Aligned(16) || !a.W.Aligned(16) || !a.Y.Aligned(16) || a.K%8 != 0 || a.N%8 != 0:
		return fmt.Errorf("operands not 16-byte aligned rows")
	}
	return nil
}

// CublasLtLaunch is a on cuBLASLt (see CublasLtGEMM).
func CublasLtLaunch(a MatMulArgs) (Launch, error) {
	if err := a.validate(); err != nil {
		return Launch{}, err
	}
	if err := cublasLtOK(a); err != nil {
		return Launch{}, fmt.Errorf("%s: %w", CublasLtGEMM, err)
	}
	return Launch{Kernel: CublasLtGEMM, DTypes: []string{a.YType}, Args: []Arg{i32(a.T), i32(a.N), i32(a.K),
		ptrArg(a.X), ptrArg(a.W), ptrArg(a.Y), i32(b2i(a.Accumulate))}}, nil
}
