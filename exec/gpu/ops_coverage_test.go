package gpu

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"lagc/exec/cpu"
	"lagc/ir"
	"lagc/lower"
)

// gpuVsCPU names, per op, the tests of this package that compare its CUDA
// kernels with exec/cpu's at the kernel level. TestOpsGPU compares every
// op of the samples end to end besides.
var gpuVsCPU = map[string][]string{
	"add":            {"TestElementwiseGPU", "TestAddRMSNormGPU"},
	"argmax":         {"TestArgMaxGPU"},
	"attention":      {"TestAttentionDecodeGPU", "TestAttentionPrefillGPU", "TestAttentionPrefillTCGPU", "TestKVStoreGPU"},
	"attention_gate": {"TestAttentionGateGPU", "TestAttentionDecodeRowsGPU", "TestAttentionDecodeReplayGPU", "TestOpsGPU"},
	"concat":         {"TestOpsGPU"},
	"embedding":      {"TestEmbeddingGPU"},
	"matmul":         {"TestMatMulShapes", "TestMatMulPaths", "TestMatMulCublasLtGPU"},
	"matmul_add":     {"TestMatMulPaths", "TestQGEMVXInGPU"},
	"matmul_split":   {"TestMatMulPaths", "TestOpsGPU"},
	"matmul_swiglu":  {"TestMatMulPaths"},
	"moe_experts":    {"TestMoEExperts"},
	"moe_grouped":    {"TestMoEExperts", "TestOpsGPU", "TestMoECombineNormGPU"},
	"mul":            {"TestElementwiseGPU"},
	"norm_rope":      {"TestNormRoPEGPU", "TestQKNormRopeGPU", "TestNormRoPEItemsGPU", "TestOpsGPU"},
	"reshape":        {"TestOpsGPU"},
	"rms_norm":       {"TestRMSNormGPU", "TestRMSNormCastGPU", "TestAddRMSNormGPU", "TestMoECombineNormGPU"},
	"rope":           {"TestRoPEGPU"},
	"router_topk":    {"TestRouterTopKGPU", "TestRouterFusedGPU"},
	"silu":           {"TestElementwiseGPU"},
	"softplus_gate":  {"TestSoftplusGateGPU"},
	"split":          {"TestOpsGPU"},
}

// testFuncs lists the Test functions of this package's test files.
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}

// templateArgs returns how many template arguments kernel name of file
// takes (0 for a plain kernel), or -1 when the file does not define it.
func templateArgs(t *testing.T, file, name string) int {
	t.Helper()
	src, err := source(file)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:template\s*<([^>]*)>\s*)?(?:extern "C"\s+)?__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?` + name + `\s*\(`)
	m := re.FindStringSubmatch(src)
	switch {
	case m == nil:
		return -1
	case strings.TrimSpace(m[1]) == "":
		return 0
	}
	return strings.Count(m[1], ",") + 1
}

// TestOpCoverage: every op of the op table (ir.OpNames) has a CPU kernel,
// a lowering rule, lowered launches in the op samples whose kernels the
// CUDA sources define with as many template arguments as lower passes,
// and a GPU-vs-CPU test; no registry names an op the table lacks.
func TestOpCoverage(t *testing.T) {
	ops := ir.OpNames()
	tests := testFuncs(t)
	// The samples' launches by op, decode and prefill (the planned chunk
	// and a shorter one), in both dtypes.
	launched := map[string][]lower.Launch{}
	for _, s := range opSamples {
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			p, err := lower.Lower(s.graph(t), lower.Options{DType: dt, Chunk: 16, MaxContext: 64})
			if err != nil {
				t.Fatalf("%s %s: %v", s.name, dt, err)
			}
			for _, sc := range []*lower.Schedule{p.Decode, p.Prefill} {
				for _, T := range []int{sc.Tokens, (sc.Tokens + 1) / 2} {
					steps, err := p.At(sc, T)
					if err != nil {
						t.Fatal(err)
					}
					for i, ls := range steps {
						op := sc.Steps[i].Op
						launched[op] = append(launched[op], ls...)
					}
				}
			}
		}
	}
	for _, op := range ops {
		if !slices.Contains(cpu.Ops(), op) {
			t.Errorf("%s: no CPU kernel (exec/cpu's kernels)", op)
		}
		if !slices.Contains(lower.RuleOps(), op) {
			t.Errorf("%s: no lowering rule (lower/rules*.go)", op)
		}
		if len(launched[op]) == 0 {
			t.Errorf("%s: no op sample lowers it to a launch (add one to opSamples)", op)
		}
		checked := map[string]bool{}
		for _, l := range launched[op] {
			sig := l.NameExpr() + " " + l.File
			if l.Kernel == lower.Memcpy || checked[sig] {
				continue
			}
			checked[sig] = true
			switch n := templateArgs(t, l.File, l.Kernel); {
			case n < 0:
				t.Errorf("%s: kernel %s is not defined in cuda/kernels/%s", op, l.Kernel, l.File)
			case n != len(l.DTypes)+len(l.Ints):
				t.Errorf("%s: %s takes %d template arguments, lower gives %d", op, l.Kernel, n, len(l.DTypes)+len(l.Ints))
			}
		}
		if len(gpuVsCPU[op]) == 0 {
			t.Errorf("%s: no GPU-vs-CPU test (gpuVsCPU)", op)
		}
		for _, name := range gpuVsCPU[op] {
			if !tests[name] {
				t.Errorf("%s: gpuVsCPU names %s, which this package does not define", op, name)
			}
		}
	}
	for what, names := range map[string][]string{"exec/cpu kernel": cpu.Ops(), "lowering rule": lower.RuleOps(), "GPU-vs-CPU test": slices.Collect(maps.Keys(gpuVsCPU))} {
		for _, op := range names {
			if !slices.Contains(ops, op) {
				t.Errorf("a %s for %q, which is not an op", what, op)
			}
		}
	}
}
