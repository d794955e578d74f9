package gpu

// Host-side pieces of the executor, tested without a GPU.

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"lagc/cuda"
	"lagc/lower"
)

func TestSplitGateUp(t *testing.T) {
	// E=2, I=2, H=3: expert e holds gate rows g_e0, g_e1 then up rows u_e0, u_e1.
	var d []float32
	for e := 0; e < 2; e++ {
		for r := 0; r < 4; r++ {
			for h := 0; h < 3; h++ {
				d = append(d, float32(100*e+10*r+h))
			}
		}
	}
	got, err := splitGateUp(d, []int{2, 4, 3})
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, rows := range [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}} {
		for h := 0; h < 3; h++ {
			want = append(want, float32(100*rows[0]+10*rows[1]+h))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	for _, bad := range [][]int{{2, 3, 3}, {4, 6}, {2, 4, 4}} {
		if _, err := splitGateUp(d, bad); err == nil {
			t.Errorf("shape %v accepted", bad)
		}
	}
}

func TestDeriveConcat(t *testing.T) {
	p := &lower.Plan{Weights: []lower.Weight{
		{Name: "a", Shape: []int{2, 2, 1}}, {Name: "b", Shape: []int{2, 1, 1}},
		{Name: "ab", Shape: []int{2, 3, 1}, From: &lower.Derive{Op: "concat", Axis: 1, Srcs: []int{0, 1}}},
	}}
	got, err := derive(p, p.Weights[2], [][]float32{{1, 2, 3, 4}, {5, 6}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, 2, 5, 3, 4, 6}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := derive(p, lower.Weight{Name: "x", Shape: []int{1}, From: &lower.Derive{Op: "split"}}, nil); err == nil {
		t.Fatal("split transform accepted")
	}
}

func TestEncode(t *testing.T) {
	v := make([]float32, 200000) // past the parallel grain
	for i := range v {
		v[i] = float32(i)*1.0009765625 - 7
	}
	b := encode(v, cuda.BF16)
	if len(b) != 2*len(v) {
		t.Fatalf("%d bytes", len(b))
	}
	for _, i := range []int{0, 1, 65535, 65536, 199999} {
		if got, want := uint16(b[2*i])|uint16(b[2*i+1])<<8, cuda.F32ToBF16(v[i]); got != want {
			t.Fatalf("element %d: %#x, want %#x", i, got, want)
		}
	}
	if got := encode(v[:3], cuda.F32); len(got) != 12 {
		t.Fatalf("f32: %d bytes", len(got))
	}
}

func TestBuildProfile(t *testing.T) {
	entries := []ProfileEntry{
		{Class: "decode", Node: "blk.0.q", Op: "matmul", Launcher: "MatMul", Layer: 0, Launches: 3, GPU: 30 * time.Microsecond},
		{Class: "decode", Node: "blk.1.o", Op: "attention", Launcher: "AttentionDecode", Layer: 1, Launches: 3, GPU: 12 * time.Microsecond},
		{Class: "decode", Node: "logits", Op: "matmul", Launcher: "MatMul", Layer: -1, Launches: 3, GPU: 90 * time.Microsecond},
		{Class: "prefill", Node: "blk.0.q", Op: "matmul", Launcher: "MatMul", Layer: 0, Launches: 1, GPU: time.Millisecond},
	}
	p, err := BuildProfile(entries, map[string]int{"decode": 3, "prefill": 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Sample) != len(entries) {
		t.Fatalf("%d samples", len(q.Sample))
	}
	for i, s := range q.Sample {
		e := entries[i]
		var stack []string
		for _, l := range s.Location {
			stack = append(stack, l.Line[0].Function.Name)
		}
		want := []string{e.Node, "op " + e.Op, e.Class + " " + layerName(e.Layer), e.Class}
		if !slices.Equal(stack, want) || s.Value[0] != e.Launches || s.Value[1] != e.GPU.Nanoseconds() ||
			s.Label["launcher"][0] != e.Launcher || s.NumLabel["layer"][0] != int64(e.Layer) {
			t.Errorf("sample %d: stack %v values %v labels %v %v", i, stack, s.Value, s.Label, s.NumLabel)
		}
	}
}
