package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func runLagc(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	compileStdout = &out
	defer func() { compileStdout = os.Stdout }()
	code := runMain(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestCompileS21 is the acceptance check of `lagc compile` for
// Laguna-S-2.1: LAGUNA.md's parameter counts and the layer pattern.
func TestCompileS21(t *testing.T) {
	out, errs, code := runLagc(t, "compile", "../../models/laguna.yaml", "--preset", "laguna-s-2.1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"parameters: 117.56B total",
		"active per token: 8.14B",
		"layers (48):",
		"  moe_grouped       47\n",
		"decode T=1",
		"prefill T=2048",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	row := regexp.MustCompile(`(?m)^  (\d+)\s+(full|sliding)\s+(-|\d+)\s+(\d+)\s+8\s+(dense|moe)$`)
	rows := row.FindAllStringSubmatch(out, -1)
	if len(rows) != 48 {
		t.Fatalf("%d layer rows:\n%s", len(rows), out)
	}
	for i, r := range rows {
		want := []string{"sliding", "512", "72", "moe"}
		if i%4 == 0 {
			want = []string{"full", "-", "48", "moe"}
		}
		if i == 0 {
			want[3] = "dense"
		}
		if r[1] != strconv.Itoa(i) || r[2] != want[0] || r[3] != want[1] || r[4] != want[2] || r[5] != want[3] {
			t.Errorf("layer row %d: %q, want %v", i, r[0], want)
		}
	}
	for _, p := range []string{"01  shapes", "02  qkvg-concat", "03  norm-rope", "04  attention-gate", "05  gate-up-fuse",
		"06  shared-expert-merge", "07  residual-fold", "08  expert-order", "09  cse", "10  dce", "11  memplan"} {
		if !strings.Contains(out, p) {
			t.Errorf("pass timing %q missing", p)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestCompileDumps(t *testing.T) {
	dir := t.TempDir()
	_, errs, code := runLagc(t, "compile", "--preset", "synthetic-tiny", "--passes", "shapes,cse,dce,memplan", "--dump-after", "all", "--dump-dir", dir, "--dump-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	var got []string
	for _, n := range names {
		got = append(got, filepath.Base(n))
	}
	if strings.Join(got, " ") != "01-shapes.json 02-cse.json 03-dce.json 04-memplan.json" {
		t.Fatalf("dumps %v", got)
	}
	// cse, dce and memplan leave the graph as it was: their dumps say so
	// instead of repeating it, and memplan's lists the arena offsets.
	b, err := os.ReadFile(filepath.Join(dir, "04-memplan.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SameAs string `json:"same_as"`
		Memory []struct {
			Tokens  int
			Buffers []struct{ Value string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil || d.SameAs != "03-dce.json" || len(d.Memory) != 4 || d.Memory[3].Tokens != 2048 || len(d.Memory[0].Buffers) < 50 {
		t.Fatalf("memplan dump: %v, %+v", err, d)
	}
}

func TestCompileErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	src := strings.Replace(mustRead(t, "../../models/laguna.yaml"), "rms_norm(x, attn_norm.weight)", "rms_nrm(x, attn_norm.weight)", 1)
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"compile"}, 2, "give exactly one of --preset, --config or --model"},
		{[]string{"compile", "--preset", "laguna-xl"}, 2, `unknown preset "laguna-xl"`},
		{[]string{"compile", "--preset", "synthetic-tiny", "--passes", "shapes,fuse-everything"}, 2, `--passes: unknown pass "fuse-everything"`},
		{[]string{"compile", "--preset", "synthetic-tiny", "--disable-pass", "nope"}, 2, `--disable-pass: unknown pass "nope"`},
		{[]string{"compile", "--preset", "synthetic-tiny", "--passes", "memplan,dce"}, 1, "pass dce must run before memplan"},
		{[]string{"compile", "--preset", "synthetic-tiny", "--dump-format", "svg"}, 2, "expected text, dot or json"},
		{[]string{"compile", bad, "--preset", "synthetic-tiny"}, 1, bad + ":"},
		{[]string{"compile", bad, "--preset", "synthetic-tiny"}, 1, `unknown op "rms_nrm"`},
	}
	for _, c := range cases {
		_, errs, code := runLagc(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func TestCompileHelpAndEmit(t *testing.T) {
	for _, args := range [][]string{{"compile", "--help"}, {"help", "compile"}} {
		out, _, code := runLagc(t, args...)
		if code != 0 || !strings.Contains(out, "-dump-after") || !strings.Contains(out, "memplan") {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
	}
	out, errs, code := runLagc(t, "compile", "--preset", "synthetic-tiny", "--emit", "text", "--disable-pass", "memplan")
	if code != 0 || !strings.HasPrefix(out, "graph laguna\n") {
		t.Fatalf("emit text: %d %s\n%.200s", code, errs, out)
	}
}

func TestCompileCheckpoint(t *testing.T) {
	dir := "../../testdata/fixtures/tiny_sharded_perelem_tied"
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal("committed fixture missing:", err)
	}
	out, errs, code := runLagc(t, "compile", "--model", dir, "--emit", "text")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// Tied embeddings, per-element gate, weights stored as f32.
	for _, want := range []string{"= matmul(%hn, @token_embd.weight)", `gating="per-element"}`, "weight @token_embd.weight: f32["} {
		if !strings.Contains(out, want) {
			t.Errorf("graph lacks %q", want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCompileKernelCounts checks the kernel counts of the summary against
// the launches of one Laguna layer counted by hand. Unfused: attention 13
// (norm, q/k/v/g matmuls, q/k norms, two ropes, attention, gate, o_proj,
// add), dense MLP 7 (norm, gate, up, silu, mul, down, add), MoE 11 (norm,
// router matmul, top-k, experts, shared gate, up, silu, mul, down, add,
// add); plus 4 (embedding, final norm, lm_head, argmax). Fused: attention
// 6 (norm, matmul_split, two norm_ropes, attention_gate, matmul_add),
// dense 3 (norm, matmul_swiglu, matmul_add), MoE 4 (norm, router matmul,
// top-k, moe_grouped).
func TestCompileKernelCounts(t *testing.T) {
	cases := []struct {
		args          []string
		with, without int
	}{
		{[]string{"--preset", "laguna-s-2.1"}, 4 + 9*1 + 10*47, 4 + 20*1 + 24*47},
		{[]string{"--preset", "synthetic-tiny"}, 4 + 9*1 + 10*3, 4 + 20*1 + 24*3},
		// Only attention-gate: each attention writes its gated output (20 -> 19, 24 -> 23).
		{[]string{"--preset", "synthetic-tiny", "--passes", "shapes,attention-gate,cse,dce,memplan"}, 4 + 19*1 + 23*3, 4 + 20*1 + 24*3},
		// Only norm-rope: each attention's q and k norms join their ropes.
		{[]string{"--preset", "synthetic-tiny", "--passes", "shapes,norm-rope,cse,dce,memplan"}, 4 + 18*1 + 22*3, 4 + 20*1 + 24*3},
		// Only residual-fold: o_proj and the dense down_proj absorb their
		// adds (dense 20 -> 18); in a MoE layer o_proj and the shared
		// down_proj do, and add(h, routed + shared) is left (24 -> 22).
		{[]string{"--preset", "synthetic-tiny", "--passes", "shapes,residual-fold,cse,dce,memplan"}, 4 + 18*1 + 22*3, 4 + 20*1 + 24*3},
		{[]string{"--preset", "synthetic-tiny", "--disable-pass", strings.Join([]string{"qkvg-concat", "norm-rope", "attention-gate", "gate-up-fuse", "shared-expert-merge", "residual-fold", "expert-order"}, ",")},
			4 + 20*1 + 24*3, 4 + 20*1 + 24*3},
	}
	row := regexp.MustCompile(`(?m)^  with fusions\s+(\d+)\s+(\d+)\n  without fusions\s+(\d+)\s+(\d+)$`)
	for _, c := range cases {
		out, errs, code := runLagc(t, append([]string{"compile"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		m := row.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%v: no kernel table:\n%s", c.args, out)
		}
		want := []string{strconv.Itoa(c.with), strconv.Itoa(c.with), strconv.Itoa(c.without), strconv.Itoa(c.without)}
		if strings.Join(m[1:], " ") != strings.Join(want, " ") {
			t.Errorf("%v: kernels %v, want %v", c.args, m[1:], want)
		}
	}
}

func TestParamCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{117_560_000_000, "117.56B"}, {2_800_000, "2.80M"}, {999_999, "1.00M"}, {999_949, "999.9K"}, {999_996_000, "1.00B"}, {999_990_000, "999.99M"}, {51_442, "51.4K"}, {999, "999"}, {0, "0"}} {
		if got := paramCount(c.n); got != c.want {
			t.Errorf("paramCount(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	out, errs, code := runLagc(t, "compile", "--preset", "synthetic-tiny")
	if code != 0 || !strings.Contains(out, "parameters: 51.4K total (51442)") {
		t.Fatalf("exit %d (%s): the tiny preset's count is not in K:\n%s", code, errs, out)
	}
}

// TestCompileDOTLayers: --emit dot draws each layer in a cluster (S-2.1:
// 48), pos once per layer, and --layers selects layers.
func TestCompileDOTLayers(t *testing.T) {
	out, errs, code := runLagc(t, "compile", "--preset", "laguna-s-2.1", "--emit", "dot")
	if code != 0 || strings.Count(out, "subgraph cluster_") != 48 || strings.Count(out, `label="%pos\ni32[T]"`) != 48 {
		t.Fatalf("exit %d (%s): %d clusters, pos drawn %d times; want 48 and 48", code, errs,
			strings.Count(out, "subgraph cluster_"), strings.Count(out, `label="%pos\ni32[T]"`))
	}
	out, errs, code = runLagc(t, "compile", "--preset", "synthetic-tiny", "--emit", "dot", "--layers", "0-1,3")
	for _, want := range []string{"cluster_0 ", "cluster_1 ", "cluster_3 ", "embedding", "outputs"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("--layers 0-1,3: exit %d (%s), lacks %q", code, errs, want)
		}
	}
	if n := strings.Count(out, "subgraph cluster_"); n != 3 {
		t.Fatalf("--layers 0-1,3 drew %d layers", n)
	}
	for _, c := range []struct{ layers, want string }{
		{"4", "the model has layers 0-3"},
		{"3-1", `"3-1" is not a range`},
		{"a", "expected layer numbers"},
		{"1,", "expected layer numbers"},
	} {
		if _, errs, code := runLagc(t, "compile", "--preset", "synthetic-tiny", "--emit", "dot", "--layers", c.layers); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("--layers %s: exit %d, %q; want 2 and %q", c.layers, code, errs, c.want)
		}
	}
	if _, errs, code := runLagc(t, "compile", "--preset", "synthetic-tiny", "--layers", "1"); code != 2 || !strings.Contains(errs, "--layers goes with --emit dot") {
		t.Errorf("--layers without --emit dot: exit %d, %q", code, errs)
	}
}
