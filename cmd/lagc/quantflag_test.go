package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"lagc/ckpt"
)

// TestCompileQuantTypes: `lagc compile --quant` gives the preset's weights
// the recipe's types, and the summary's table says what each type holds
// and what a decode token reads (S-2.1 under Q4_K_M: about 6.5 GB, the
// figure issue 12's roofline is taken from; bf16: 2 bytes a parameter).
func TestCompileQuantTypes(t *testing.T) {
	row := func(out, typ string) []string {
		m := regexp.MustCompile(`(?m)^  ` + typ + `\s+(\d+)\s+(\S+)\s+(\S+ \S+)\s+(\S+ \S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %s row in the weight types:\n%s", typ, out)
		}
		return m[1:]
	}
	for _, c := range []struct {
		quant string
		rows  map[string][]string
	}{
		{"", map[string][]string{
			"bf16": {"767", "117.56B", "218.98 GiB", "15.16 GiB"},
			"all":  {"814", "117.56B", "218.98 GiB", "15.16 GiB"},
		}},
		{"q4_k_m", map[string][]string{
			"q4_k": {"145", "113.97B", "59.71 GiB", "2.38 GiB"}, // routed experts: 10 of 256 a token
			"q8_0": {"382", "3.55B", "3.52 GiB", "3.52 GiB"},    // attention, shared expert, dense layer, head: all read
			"f32":  {"287", "37.28M", "142.23 MiB", "142.23 MiB"},
			"all":  {"814", "117.56B", "63.36 GiB", "6.04 GiB"}, // 6.48e9 bytes
		}},
	} {
		args := []string{"compile", "--preset", "laguna-s-2.1"}
		if c.quant != "" {
			args = append(args, "--quant", c.quant)
		}
		out, errs, code := runLagc(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		for typ, want := range c.rows {
			if got := row(out, typ); strings.Join(got, " | ") != strings.Join(want, " | ") {
				t.Errorf("%v: %s row %q, want %q", args, typ, got, want)
			}
		}
	}
}

// TestQuantFlagErrors: --quant is checked before anything is built: an
// unknown recipe names the known ones, and a checkpoint keeps its types.
func TestQuantFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", "--preset", "synthetic-tiny", "--quant", "q4_k_x"}, `unknown quantisation "q4_k_x": want one of`},
		{[]string{"plan", "--preset", "synthetic-tiny", "--quant", "q4"}, "q4_k_m, q5_k_m"},
		{[]string{"compile", "--model", "../../testdata/quant/q4_k_m.gguf", "--quant", "q8_0"}, "a checkpoint (--model) keeps its own"},
		{[]string{"plan", "--model", "../../testdata/quant/q4_k_m.gguf", "--quant", "q8_0"}, "a checkpoint (--model) keeps its own"},
	} {
		_, errs, code := runLagc(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error (2) saying %q", c.args, code, errs, c.want)
		}
	}
}

// TestPlanQuantFits: the S-2.1 plan under Q4_K_M fits an H200 (no memory
// warning; bf16 does not, TestPlanWarnsGPUMemory) and names the routed
// experts' quantised decode kernels.
func TestPlanQuantFits(t *testing.T) {
	out, errs, code := runPlanCmd(t, "plan", "--preset", "laguna-s-2.1", "--quant", "q4_k_m", "--ctx", "4096")
	if code != 0 || strings.Contains(errs, "warning") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"weights: 575 tensors uploaded (143 derived), 64.95 GiB", "moe_gateup_qgemv", "moe_down_qgemv", "gemm_wgmma_q<"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q", want)
		}
	}
}

// TestPlanMixedExpertTypes: llama.cpp's own Q4_K_M mixture (q6_k downs of
// q4_k experts in some layers) plans on the quantised kernels of each
// stack's type, and recipes whose fallbacks leave the bundled-size model's
// stacks in types the quantised kernels do not read together (q8_0 with
// f16) plan them as bf16 stacks; both were refused ("expert stacks of
// mixed dtypes").
func TestPlanMixedExpertTypes(t *testing.T) {
	out, errs, code := runPlanCmd(t, "plan", "--model", "../../testdata/quant/q4_k_m-llama.gguf", "--gpu-mem", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	secs := planSections(out)
	for sec, want := range map[string][]string{
		"decode T=1": {"moe_gateup_qgemv_trig<12, ", "moe_down_qgemv_pre<bf16_t, 14, "},
		// q4_k's gate+up and q6_k's down GEMMs on gemm_wgmma_q, f16 operands
		"prefill T=2048": {"gemm_wgmma_q<half_t, 112, ", "gemm_wgmma_q<bf16_t, 114, "},
	} {
		for _, w := range want {
			if !slices.ContainsFunc(secs[sec], func(l string) bool { return strings.HasPrefix(l, w) }) {
				t.Errorf("%s: no %q launch", sec, w)
			}
		}
	}
	for _, q := range []string{"q6_k", "q8_0"} {
		out, errs, code := runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--quant", q)
		if code != 0 || !strings.Contains(out, "ffn_gate_up_exps_shexp.weight:bf16[") || !strings.Contains(out, "moe_down_gemv<bf16_t, bf16_t") {
			t.Errorf("synthetic-tiny --quant %s: exit %d (%s); want its expert stacks planned as bf16", q, code, errs)
		}
	}
}

// TestPlanConversionNote: a model in a type the GPU has no kernels for
// (q3_k) is uploaded in bf16: lagc plan says so under the weights line and
// in its memory warning, where 47 GiB of file become 219 GiB; a recipe
// whose types all have kernels converts nothing (its q4_k embedding table
// stays so: qembedding).
func TestPlanConversionNote(t *testing.T) {
	out, errs, code := runPlanCmd(t, "plan", "--preset", "laguna-s-2.1", "--quant", "q3_k", "--ctx", "4096")
	const note = "converted at upload, no GPU kernel reading their type there: 194 q3_k tensors, 47.03 GiB as stored, 218.91 GiB in bf16"
	if code != 0 || !strings.Contains(out, "\n  "+note+"\n") || !strings.Contains(errs, "warning: the plan needs ") || !strings.Contains(errs, "(weights "+note+")") {
		t.Errorf("exit %d; stdout lacks the note or stderr the warning with it: %q", code, errs)
	}
	out, _, _ = runPlanCmd(t, "plan", "--preset", "laguna-s-2.1", "--quant", "q4_k_m", "--ctx", "4096")
	if strings.Contains(out, "converted at upload") || !strings.Contains(out, "qembedding<bf16_t, 12>") {
		t.Errorf("q4_k_m: a conversion noted, or the embedding table not read quantised")
	}
}

// TestTensorTypeFlag: --tensor-type PATTERN=TYPE (llama-quantize's) puts
// the matching tensors in TYPE before --quant's rules, in compile, plan,
// bench and convert alike; a value that is not PATTERN=TYPE, a bad
// pattern, a recipe for TYPE, or the flag without --quant is an error.
func TestTensorTypeFlag(t *testing.T) {
	out, errs, code := runLagc(t, "compile", "--preset", "laguna-s-2.1", "--quant", "q4_k",
		"--tensor-type", "ffn_down|attn_v=q6_k", "--tensor-type", `^output\.weight$=q6_k`)
	if code != 0 || !regexp.MustCompile(`(?m)^  q6_k\s+144\s`).MatchString(out) {
		t.Errorf("compile: exit %d (%s); want 144 q6_k tensors (48 ffn_down, 47 shared downs, 48 attn_v, the head):\n%s", code, errs, out)
	}
	plan, errs, code := runPlanCmd(t, "plan", "--preset", "laguna-s-2.1", "--quant", "q4_k", "--tensor-type", "ffn_down=q6_k", "--ctx", "4096")
	if code != 0 || !strings.Contains(plan, "moe_down_qgemv_pre<bf16_t, 14, ") || !strings.Contains(plan, "moe_gateup_qgemv_trig<12, ") {
		t.Errorf("plan: exit %d (%s); want q4_k gate+up and q6_k down GEMVs", code, errs)
	}
	dir := t.TempDir()
	gguf := filepath.Join(dir, "tiny.gguf")
	if _, errs, code := runLagc(t, "convert", "--model", "../../models/tiny", "-o", gguf, "--quant", "q8_0", "--tensor-type", "attn_v=q4_0"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	synth := filepath.Join(dir, "synth.gguf")
	if _, errs, code := runLagc(t, "convert", "--synthetic", "--preset", "synthetic-tiny", "-o", synth, "--quant", "q8_0", "--tensor-type", "attn_v=q4_0"); code != 0 {
		t.Fatalf("convert --synthetic: exit %d: %s", code, errs)
	}
	for _, path := range []string{gguf, synth} {
		ck, err := ckpt.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		vs := 0
		for _, ti := range ck.Tensors() {
			want := ckpt.Q8_0
			if strings.Contains(ti.Name, "attn_v") {
				want, vs = ckpt.Q4_0, vs+1
			}
			if ckpt.Quantizable(ti) && ti.DType != want && ti.DType != ckpt.F16 {
				t.Errorf("convert %s: %s is %s, want %s", filepath.Base(path), ti.Name, ti.DType, want)
			}
		}
		if vs == 0 {
			t.Errorf("convert %s: no attn_v tensor", filepath.Base(path))
		}
		ck.Close()
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", "--preset", "synthetic-tiny", "--tensor-type", "a=q6_k"}, "needs --quant"},
		{[]string{"compile", "--preset", "synthetic-tiny", "--quant", "q8_0", "--tensor-type", "a"}, "want PATTERN=TYPE"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--quant", "q8_0", "--tensor-type", "a(=q6_k"}, "missing closing )"},
		{[]string{"compile", "--preset", "synthetic-tiny", "--quant", "q8_0", "--tensor-type", "a=q4_k_m"}, "not a type lagc quantises to"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--tensor-type", "a=q6_k"}, "--preset has no weights"},
		{[]string{"convert", "--model", "../../models/tiny", "-o", filepath.Join(dir, "x.gguf"), "--tensor-type", "a=q6_k"}, "needs --quant"},
		{[]string{"convert", "--synthetic", "--preset", "synthetic-tiny", "-o", filepath.Join(dir, "y.gguf"), "--tensor-type", "a=q6_k"}, "needs --quant"},
	} {
		_, errs, code := runLagc(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error saying %q", c.args, code, errs, c.want)
		}
	}
}

// FuzzTensorTypeFlag: --tensor-type's parser takes any string without
// panicking; what it accepts is a compiled pattern and a type lagc
// quantises to, and prints back as it was given.
func FuzzTensorTypeFlag(f *testing.F) {
	for _, s := range []string{"ffn_down=q6_k", `^output\.weight$=q8_0`, "a=b=q4_k", "=q4_k", "a=", "(=q4_k", "x=q4_k_m", "attn_v|ffn_down=iq4_xs", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var tt tensorTypes
		if err := tt.Set(s); err != nil {
			return
		}
		if len(tt) != 1 || tt[0].Pattern == nil || !tt[0].Type.CanQuantize() {
			t.Fatalf("%q accepted as %+v", s, tt)
		}
		var again tensorTypes
		if err := again.Set(tt.String()); err != nil || again.String() != tt.String() {
			t.Fatalf("%q printed as %q, which reads back as %q (%v)", s, tt.String(), again.String(), err)
		}
	})
}

// TestPlanDequantNote: lagc plan says what each prefill chunk dequantises
// into the workspace: llama.cpp's Q4_K_M mixture (q6_k expert downs under
// q4_k) with LAGC_QMOE_SHAPE=noq6k dequantises the 47 MoE layers' down
// stacks, 1.5 GiB of bf16 rows each; by default the grouped GEMMs read
// them in place and the line is absent, as for lagc's q4_k_m recipe.
func TestPlanDequantNote(t *testing.T) {
	args := []string{"plan", "--preset", "laguna-s-2.1", "--quant", "q4_k", "--tensor-type", "ffn_down_exps=q6_k", "--ctx", "4096"}
	out, errs, code := runPlanCmd(t, args...)
	if code != 0 || strings.Contains(out, "prefill dequantises") || !strings.Contains(out, "gemm_wgmma_q<bf16_t, 114, ") {
		t.Errorf("exit %d (%s); a dequantisation noted, or no q6_k grouped GEMM", code, errs)
	}
	const note = "\nprefill dequantises 47 matrices (47 expert stacks) into the workspace every chunk, 70.50 GiB written and read back\n"
	t.Setenv("LAGC_QMOE_SHAPE", "noq6k")
	out, errs, code = runPlanCmd(t, args...)
	if code != 0 || !strings.Contains(out, note) {
		t.Errorf("noq6k: exit %d (%s); stdout lacks %q", code, errs, note)
	}
	t.Setenv("LAGC_QMOE_SHAPE", "")
	if out, _, _ := runPlanCmd(t, "plan", "--preset", "laguna-s-2.1", "--quant", "q4_k_m", "--ctx", "4096"); strings.Contains(out, "prefill dequantises") {
		t.Errorf("q4_k_m: a dequantisation noted")
	}
}
