package gpu

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/ir"
	"lagc/lower"
	"lagc/models"
	"lagc/passes"
)

var update = flag.Bool("update", false, "rewrite the launch traces in testdata/launches")

// traceModel is a model whose launches are pinned in testdata/launches.
type traceModel struct {
	name   string
	config func() (*config.Config, error)
	layers int      // 0: all
	passes []string // nil: the default pipeline
	quant  string   // a quantisation recipe for the weights ("": the plan's dtype)
	// rules come before the recipe's own (llama.cpp's mixtures, which
	// lagc does not write).
	rules []ckpt.TypeRule
	seqs  int // sequence slots (0: 1)
	// cublasLt plans prefill GEMMs on cuBLASLt (lower.Options.CublasLt).
	cublasLt bool
	qmoe     lower.QMoEForce // lower.Options.QMoE
	// prefillBF16 keeps bf16 copies of the dense quantised weights
	// (lower.Options.PrefillBF16).
	prefillBF16 bool
	disable     []string // lower.Options.DisableFusions
	enable      []string // lower.Options.EnableFusions
}

var traceModels = []traceModel{
	{name: "laguna-s-2.1", config: func() (*config.Config, error) { return config.Preset("laguna-s-2.1") }, layers: 4},
	{name: "laguna-xs-2", config: func() (*config.Config, error) { return config.Preset("laguna-xs-2") }, layers: 4},
	{name: "laguna-s-2.1-q4_k_m", config: func() (*config.Config, error) { return config.Preset("laguna-s-2.1") }, layers: 4, quant: "q4_k_m"},
	{name: "laguna-s-2.1-q4_k_m-copies", config: func() (*config.Config, error) { return config.Preset("laguna-s-2.1") }, layers: 4, quant: "q4_k_m",
		prefillBF16: true},
	{name: "laguna-xs-2-iq4_xs", config: func() (*config.Config, error) { return config.Preset("laguna-xs-2") }, layers: 4, quant: "iq4_xs"},
	// llama.cpp's Q4_K_M mixture in its layers that raise ffn_down and
	// attn_v: q6_k downs (routed and shared) under q4_k gate and up.
	{name: "laguna-s-2.1-q4_k-q6_k-downs", config: func() (*config.Config, error) { return config.Preset("laguna-s-2.1") }, layers: 2, quant: "q4_k",
		rules: []ckpt.TypeRule{{Pattern: regexp.MustCompile(`ffn_down|attn_v|^output\.weight$`), Type: ckpt.Q6_K}}},
	{name: "synthetic-tiny", config: func() (*config.Config, error) { return config.Preset("synthetic-tiny") }},
	{name: "synthetic-tiny-unfused", config: func() (*config.Config, error) { return config.Preset("synthetic-tiny") },
		passes: []string{"shapes", "cse", "dce", "memplan"}},
	{name: "bundled", config: func() (*config.Config, error) { return config.LoadHFConfig("../../models/tiny/config.json") }},
}

// Trace shapes: a prompt of a full prefill chunk and a ragged one, a
// decode step, then a new sequence of a short prompt (a chunk the GEMV
// paths serve).
const (
	traceChunk   = 2048
	traceRagged  = 37
	traceShort   = 5
	traceContext = 4096
)

// traceModelNamed is the trace model called name.
func traceModelNamed(t testing.TB, name string) traceModel {
	t.Helper()
	i := slices.IndexFunc(traceModels, func(m traceModel) bool { return m.name == name })
	if i < 0 {
		t.Fatalf("no %s trace model", name)
	}
	return traceModels[i]
}

// stepsFlat is s's launches in stream order.
func stepsFlat(s *lower.Schedule) []lower.Launch {
	var out []lower.Launch
	for _, st := range s.Steps {
		out = append(out, st.Launches...)
	}
	return out
}

// tracePlan compiles m for the trace's shapes, for an H200's 132 SMs.
func tracePlan(t testing.TB, m traceModel, dt ir.DType) *lower.Plan {
	return tracePlanSMs(t, m, dt, 132)
}

func tracePlanSMs(t testing.TB, m traceModel, dt ir.DType, sms int) *lower.Plan {
	t.Helper()
	cfg, err := m.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.FirstLayers(m.layers); err != nil {
		t.Fatal(err)
	}
	g, err := models.Build("laguna.yaml", models.LagunaYAML, cfg, models.BuildOptions{WeightDType: dt})
	if err != nil {
		t.Fatal(err)
	}
	if m.quant != "" {
		r, err := ckpt.ParseRecipe(m.quant)
		if err != nil {
			t.Fatal(err)
		}
		r.Rules = append(slices.Clone(m.rules), r.Rules...)
		if err := models.SetRecipeTypes(g, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := passes.Run(g, passes.Options{Passes: m.passes}); err != nil {
		t.Fatal(err)
	}
	p, err := lower.Lower(g, lower.Options{DType: dt, Chunk: traceChunk, MaxContext: traceContext, SMs: sms, Seqs: m.seqs, CublasLt: m.cublasLt, QMoE: m.qmoe,
		PrefillBF16:    m.prefillBF16,
		DisableFusions: m.disable, EnableFusions: m.enable})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runTrace feeds the trace's tokens to ex and returns what rec recorded,
// one line per event under a header per call.
func runTrace(t testing.TB, ex *Executor, rec *Recorder) string {
	t.Helper()
	var b strings.Builder
	step := func(what string, f func() error) {
		rec.Reset()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		fmt.Fprintf(&b, "# %s\n", what)
		for _, ev := range rec.Events {
			b.WriteString(ex.Format(ev))
			b.WriteByte('\n')
		}
	}
	toks := make([]int32, traceChunk+traceRagged)
	for i := range toks {
		toks[i] = int32(1 + i%7)
	}
	// Prefill reads back no logits (a dry run's are zero anyway).
	prefill := func(n int) func() error {
		return func() error { _, err := ex.Prefill(toks[:n]); return err }
	}
	step(fmt.Sprintf("prefill %d tokens (chunks of %d)", len(toks), traceChunk), prefill(len(toks)))
	step("decode", func() error { _, _, err := ex.Forward(toks[:1]); return err })
	ex.Reset()
	step(fmt.Sprintf("reset, prefill %d tokens", traceShort), prefill(traceShort))
	return b.String()
}

// TestLaunchTraces: a dry run of each model makes exactly the launches
// pinned in testdata/launches (go test -run LaunchTraces -update rewrites
// them).
func TestLaunchTraces(t *testing.T) {
	for _, m := range traceModels {
		for _, dt := range []ir.DType{ir.BF16, ir.F32} {
			name := m.name + "-" + dt.String()
			t.Run(name, func(t *testing.T) {
				ex, rec, err := DryRun(tracePlan(t, m, dt))
				if err != nil {
					t.Fatal(err)
				}
				defer ex.Close()
				checkTrace(t, name, runTrace(t, ex, rec))
			})
		}
	}
}

// Batched traces: 16 sequence slots, a prompt in slot 3, then decode
// steps of 3 rows (bucket 4) with a prompt chunk beside them, and of 9
// rows (bucket 16).
var batchTraceModels = []string{"synthetic-tiny", "laguna-s-2.1", "laguna-s-2.1-q4_k_m"}

func runBatchTrace(t testing.TB, ex *Executor, rec *Recorder) string {
	t.Helper()
	var b strings.Builder
	run := ex.Step
	step := func(what string, segs []Segment) {
		rec.Reset()
		if _, _, err := run(segs); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		fmt.Fprintf(&b, "# %s\n", what)
		for _, ev := range rec.Events {
			b.WriteString(ex.Format(ev))
			b.WriteByte('\n')
		}
	}
	rows := func(slots ...int) []Segment {
		var segs []Segment
		for _, s := range slots {
			segs = append(segs, Segment{Slot: s, Tokens: []int32{int32(1 + s)}})
		}
		return segs
	}
	step("slot 3: prefill 5 tokens", []Segment{{Slot: 3, Tokens: []int32{1, 2, 3, 4, 5}}})
	step("decode rows of slots 0, 3, 5 and a 4-token prompt in slot 7", append(rows(0, 3, 5), Segment{Slot: 7, Tokens: []int32{4, 3, 2, 1}}))
	step("decode rows of 9 slots", rows(0, 1, 2, 3, 5, 7, 8, 9, 15))
	// StepLast: the prompt's tail (after the last attention) on its last row.
	run = ex.StepLast
	step("StepLast: decode rows of slots 0, 3 and a 6-token prompt in slot 4", append(rows(0, 3), Segment{Slot: 4, Tokens: []int32{6, 5, 4, 3, 2, 1}}))
	return b.String()
}

// TestBatchTraces pins the launches of batched steps like TestLaunchTraces.
func TestBatchTraces(t *testing.T) {
	for _, m := range traceModels {
		if !slices.Contains(batchTraceModels, m.name) {
			continue
		}
		m.seqs = 16
		name := "batch-" + m.name + "-bf16"
		t.Run(name, func(t *testing.T) {
			ex, rec, err := DryRun(tracePlan(t, m, ir.BF16))
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			checkTrace(t, name, runBatchTrace(t, ex, rec))
		})
	}
}

// checkTrace compares a trace with testdata/launches/NAME.txt, or writes
// it there with -update.
func checkTrace(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "launches", name+".txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run 'LaunchTraces|BatchTraces' -update writes it)", err)
	}
	if got != string(want) {
		t.Fatalf("the launches differ from %s:\n%s", path, firstDiff(got, string(want)))
	}
}

// firstDiff shows the first line where two texts differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n got  %s\n want %s", i+1, a, b)
		}
	}
	return "(no difference)"
}

// TestSplitGEMMPlumbing: in the S-2.1 plans (bf16 and q4_k_m), every
// prefill matmul_split is one gemm_wgmma splitting its columns (after one
// dequantisation of the whole weight for q4_k_m), whose outputs are the
// step's outputs, in order, with their widths (without
// fusePrefillGEMMNormRoPE, which sends the q and k heads elsewhere).
func TestSplitGEMMPlumbing(t *testing.T) {
	for _, name := range []string{"laguna-s-2.1", "laguna-s-2.1-q4_k_m"} {
		var m traceModel
		for _, tm := range traceModels {
			if tm.name == name {
				m = tm
			}
		}
		m.disable = append(append([]string(nil), m.disable...), "fusePrefillGEMMNormRoPE")
		p := tracePlan(t, m, ir.BF16)
		seen := 0
		for _, st := range p.Prefill.Steps {
			if st.Op != "matmul_split" {
				continue
			}
			seen++
			ls := st.Launches
			if m.quant != "" {
				if len(ls) != 2 || ls[0].Kernel != "qdequant" {
					t.Fatalf("%s %s: %d launches, not the dequantisation and the GEMM", name, st.Name, len(ls))
				}
				ls = ls[1:]
			}
			if len(ls) != 1 || ls[0].Kernel != "gemm_wgmma" || ls[0].Ints[4] != 1 {
				t.Fatalf("%s %s: not one split gemm_wgmma: %v", name, st.Name, ls)
			}
			args := ls[0].Args
			ys := []lower.Arg{args[5], args[10], args[11], args[12]}
			cs := []int64{0, args[13].Int, args[14].Int, args[15].Int, args[3].Int}
			col := int64(0)
			for i, o := range st.Out {
				if ys[i].Base != lower.BaseArena || ys[i].Offset != o.Offset || cs[i] != col {
					t.Errorf("%s %s output %d (%s at arena+%d, column %d): launch has %s+%d from column %d",
						name, st.Name, i, o.Value, o.Offset, col, ys[i].Base, ys[i].Offset, cs[i])
				}
				col += int64(o.Last(0))
			}
			if cs[len(st.Out)] != col || col != args[3].Int {
				t.Errorf("%s %s: columns end at %d, N %d", name, st.Name, col, args[3].Int)
			}
		}
		if seen == 0 {
			t.Fatalf("%s: no matmul_split in the prefill", name)
		}
	}
}

// TestKernelKeyFitsLaunches: every launch of the trace models' plans
// names no more template arguments than Kernels' cache key holds (a
// launch with more fails at Kernel, which the dry runs above never call).
func TestKernelKeyFitsLaunches(t *testing.T) {
	var key kernelKey
	for _, m := range traceModels {
		p := tracePlan(t, m, ir.BF16)
		all := [][]lower.Launch{p.Decode.Finish}
		for _, sch := range []*lower.Schedule{p.Decode, p.Prefill} {
			for _, st := range sch.Steps {
				all = append(all, st.Launches)
			}
		}
		for _, b := range []int{2, 8} {
			ls, err := p.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ls...)
		}
		for _, ls := range all {
			for _, l := range ls {
				if len(l.DTypes) > len(key.dts) || len(l.Ints) > len(key.ints) {
					t.Errorf("%s: %s has %d types and %d ints, the key holds %d and %d", m.name, l.NameExpr(), len(l.DTypes), len(l.Ints), len(key.dts), len(key.ints))
				}
			}
		}
	}
}
