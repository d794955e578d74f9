package lower

import (
	"reflect"
	"strings"
	"testing"

	"lagc/ir"
)

// tailPlan is a 2-layer Laguna-S-2.1 plan in q4_k_m (its second layer
// MoE) with a prefill chunk of 64.
func tailPlan(t *testing.T) *Plan {
	t.Helper()
	p, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", Options{DType: ir.BF16, Chunk: 64, MaxContext: 256})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAtTail: the tail starts after the last layer's attention; before it
// AtTail is At; TailNone runs no tail; TailLast runs it at one token, the
// LM head reading the final norm's row t-1 and writing logits row t-1, the
// argmax writing entry t-1; at one token TailLast is At.
func TestAtTail(t *testing.T) {
	p := tailPlan(t)
	s := p.Prefill
	start := TailStart(s)
	if start == 0 || start >= len(s.Steps) || s.Steps[start-1].Op != "attention_gate" || s.Steps[len(s.Steps)-1].Op != "argmax" {
		t.Fatalf("tail from step %d of %d", start, len(s.Steps))
	}
	const T = 37
	all, err := p.At(s, T)
	if err != nil {
		t.Fatal(err)
	}
	none, err := p.AtTail(s, T, TailNone)
	if err != nil {
		t.Fatal(err)
	}
	last, err := p.AtTail(s, T, TailLast)
	if err != nil {
		t.Fatal(err)
	}
	// Before the tail the same launches (the fusions stop at the tail's
	// edge the same way: its first step is the o_proj GEMM in both).
	for i := 0; i < start-1; i++ {
		if !reflect.DeepEqual(none[i], all[i]) || !reflect.DeepEqual(last[i], all[i]) {
			t.Fatalf("step %d (%s) differs before the tail", i, s.Steps[i].Name)
		}
	}
	for i := start; i < len(s.Steps); i++ {
		if len(none[i]) != 0 {
			t.Errorf("TailNone step %d (%s): %d launches", i, s.Steps[i].Name, len(none[i]))
		}
	}
	// The LM head and the argmax at row T-1.
	find := func(ls []Launch) (Launch, bool) {
		for _, l := range ls {
			if l.Kernel == "qgemv" || l.Kernel == "gemm_wgmma_q" || l.Kernel == "qdequant" || l.Kernel == "gemv" {
				return l, true
			}
		}
		return Launch{}, false
	}
	var logits, next *Step
	li := -1
	for i := range s.Steps {
		switch s.Steps[i].Name {
		case "logits":
			logits, li = &s.Steps[i], i
		case "next":
			next = &s.Steps[i]
		}
	}
	if logits == nil || next == nil {
		t.Fatal("no logits or next step")
	}
	head, ok := find(last[li])
	if !ok || head.Kernel != "qgemv" {
		t.Fatalf("the LM head at the last row: %v", last[li])
	}
	V := logits.Out[0].Last(1)
	if y, want := head.Args[7].Ptr(), (Ptr{BaseArena, logits.Out[0].Offset}).At(int64(T-1)*int64(V)*4); y != want {
		t.Errorf("logits written at %v, want %v (row %d)", y, want, T-1)
	}
	var argmax []Launch
	for i := li; i < len(s.Steps); i++ {
		argmax = append(argmax, last[i]...)
	}
	nextAt := Ptr{BaseArena, next.Out[0].Offset}.At(int64(T-1) * 4)
	found := false
	for _, l := range argmax {
		for _, a := range l.Args {
			if a.Kind == ArgPtr && a.Ptr() == nextAt {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no launch writes the argmax at %v (row %d)", nextAt, T-1)
	}
	one, err := p.AtTail(s, 1, TailLast)
	if err != nil {
		t.Fatal(err)
	}
	at1, err := p.At(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, at1) {
		t.Errorf("TailLast at one token differs from At")
	}
}

// TestPrintFusedStepNotes: in the printed plan every step without launches
// of its own says where its work went: "(launched by K before)" with K the
// last launch before it, or the norm_rope notes; a quantised S-2.1 decode
// has such steps for its norms, the add of its last GEMV's tail and the
// router's outputs.
func TestPrintFusedStepNotes(t *testing.T) {
	p := tailPlan(t)
	var txt strings.Builder
	if err := p.Print(&txt); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(txt.String(), "\n")
	noted := map[string]int{}
	last := "" // the kernel of the last launch line so far
	for i, l := range lines {
		if k, ok := strings.CutPrefix(l, "    "); ok {
			last = strings.FieldsFunc(k, func(r rune) bool { return r == '<' || r == ' ' })[0]
			continue
		}
		lhs, rhs, step := strings.Cut(l, " = ")
		if !strings.HasPrefix(lhs, "  ") || !step {
			continue // a title or the finish line
		}
		own := i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    ")
		launched := strings.Contains(l, "(launched by ")
		note := launched || strings.Contains(l, "(done by the attention's launch)") || strings.Contains(l, "(done by the GEMM's launch)")
		if own == note {
			t.Errorf("step line %q: launches of its own %v, a note %v", l, own, note)
		}
		if launched && !strings.Contains(l, "(launched by "+last+" before)") && !strings.Contains(l, "(launched by the step before)") {
			t.Errorf("step line %q: not noted as launched by %s, the last launch before it", l, last)
		}
		if note {
			op, _, _ := strings.Cut(rhs, "(")
			noted[op]++
		}
	}
	for _, op := range []string{"rms_norm", "add", "router_topk"} {
		if noted[op] == 0 {
			t.Errorf("no %s step noted as done by an earlier launch (noted: %v)", op, noted)
		}
	}
}
