package gpu

import (
	"slices"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/lower"
)

// shadowModels are the q4_k_m trace model without and with bf16 copies of
// its dense quantised weights (lower.Options.PrefillBF16).
func shadowModels(t *testing.T) (plain, copies traceModel) {
	t.Helper()
	for _, m := range traceModels {
		switch {
		case m.name == "laguna-s-2.1-q4_k_m":
			plain = m
		case m.prefillBF16:
			copies = m
		}
	}
	if plain.name == "" || copies.name == "" {
		t.Fatal("no q4_k_m trace models with and without bf16 copies")
	}
	return plain, copies
}

// TestPrefillShadows: with PrefillBF16 the plan keeps a bf16 copy of each
// dense quantised weight (not the experts' stacks), made at load by one
// qdequant each into the shadow region; prefill chunks then run no
// qdequant and their GEMMs read the copies, while decode and a short
// prompt's GEMVs launch exactly what the plan without copies does.
func TestPrefillShadows(t *testing.T) {
	plain, copies := shadowModels(t)
	p0, p := tracePlan(t, plain, ir.BF16), tracePlan(t, copies, ir.BF16)
	if len(p0.Shadows) != 0 || len(p.Shadows) == 0 {
		t.Fatalf("shadows: %d without the option, %d with", len(p0.Shadows), len(p.Shadows))
	}
	var sum int64
	for _, s := range p.Shadows {
		w := p.Weights[s.Weight]
		if !lower.IsQuantLayout(w.Layout) || lower.GateUpSplit(w.Layout) || len(w.Shape) != 2 || strings.Contains(w.Name, "exps") {
			t.Errorf("shadow of %s (%s, layout %q, %v)", w.Name, w.DType, w.Layout, w.Shape)
		}
		if s.Bytes != int64(w.Shape[0])*int64(w.Shape[1])*2 || s.Offset != sum {
			t.Errorf("shadow of %s: %d bytes at %d, want %d at %d", w.Name, s.Bytes, s.Offset, int64(w.Shape[0])*int64(w.Shape[1])*2, sum)
		}
		sum += (s.Bytes + lower.Alignment - 1) / lower.Alignment * lower.Alignment
	}
	if p.ShadowBytes != sum {
		t.Errorf("ShadowBytes %d, the shadows take %d", p.ShadowBytes, sum)
	}
	init, err := p.ShadowInit()
	if err != nil || len(init) != len(p.Shadows) {
		t.Fatalf("ShadowInit: %d launches, %v; want %d", len(init), err, len(p.Shadows))
	}
	for i, l := range init {
		if l.Kernel != "qdequant" || !strings.Contains(l.String(), "shadow+") {
			t.Errorf("init launch %d: %s", i, l)
		}
	}
	// flat is a step list's launches as text, in order.
	flat := func(all [][]lower.Launch, err error) []string {
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ls := range all {
			for _, l := range ls {
				out = append(out, l.String())
			}
		}
		return out
	}
	launches := func(p *lower.Plan, sch *lower.Schedule, T int) []string { return flat(p.At(sch, T)) }
	for _, T := range []int{traceChunk, 600, 100} {
		got, want := launches(p, p.Prefill, T), launches(p0, p0.Prefill, T)
		reads, dequant := 0, 0
		for _, l := range got {
			if strings.HasPrefix(l, "qdequant") {
				dequant++
			}
			if strings.Contains(l, "shadow+") {
				reads++
			}
		}
		if dequant != 0 || reads == 0 {
			t.Errorf("prefill T=%d with copies: %d qdequant launches, %d launches read the copies", T, dequant, reads)
		}
		if slices.Equal(got, want) {
			t.Errorf("prefill T=%d: the same launches with and without copies", T)
		}
	}
	for _, c := range []struct {
		sch func(*lower.Plan) *lower.Schedule
		T   int
	}{{func(p *lower.Plan) *lower.Schedule { return p.Decode }, 1}, {func(p *lower.Plan) *lower.Schedule { return p.Prefill }, traceShort}} {
		if got, want := launches(p, c.sch(p), c.T), launches(p0, c.sch(p0), c.T); !slices.Equal(got, want) {
			t.Errorf("%s T=%d: launches differ with the copies", c.sch(p).Class, c.T)
		}
	}
	// Batched decode steps run on the prefill schedule's steps and keep the
	// quantised kernels, GEMVs or (BatchGEMM, above 8 rows) the GEMMs.
	plain.seqs, copies.seqs = 16, 16
	p0, p = tracePlan(t, plain, ir.BF16), tracePlan(t, copies, ir.BF16)
	p0.BatchGEMM, p.BatchGEMM = true, true
	for _, b := range []int{4, 16} {
		if got, want := flat(p.AtBatch(b)), flat(p0.AtBatch(b)); !slices.Equal(got, want) {
			t.Errorf("batched decode of %d: launches differ with the copies", b)
		}
	}
}

// TestPrefillShadowsGPU: a prefill of 600 tokens (the bf16 GEMM path with
// and without copies) gives the same logits, bit for bit, from the copies
// made at load as from the copy each chunk makes.
func TestPrefillShadowsGPU(t *testing.T) {
	k, _ := gpu(t)
	plain, copies := shadowModels(t)
	toks := make([]int32, 600)
	for i := range toks {
		toks[i] = int32(1 + (i*7)%50)
	}
	var logits [2][]float32
	for i, m := range []traceModel{plain, copies} {
		ex, err := New(tracePlanSMs(t, m, ir.BF16, k.SMs()), nil, Options{Device: k.Dev, Eager: true})
		if err != nil {
			t.Fatal(err)
		}
		if logits[i], _, err = ex.Forward(toks); err != nil {
			ex.Close()
			t.Fatal(err)
		}
		ex.Close()
	}
	if len(logits[0]) == 0 || !slices.Equal(logits[0], logits[1]) {
		t.Fatalf("logits differ with the bf16 copies (%d and %d values)", len(logits[0]), len(logits[1]))
	}
}
