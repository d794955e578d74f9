package cpu

import (
	"math"
	"testing"
)

func TestSiLU(t *testing.T) {
	x := []float32{0, 1, -1, 2.5, -20, 20, -100, 88}
	out := make([]float32, len(x))
	if err := SiLU(out, x); err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		want := float64(v) / (1 + math.Exp(-float64(v)))
		if math.Abs(float64(out[i])-want) > 1e-7*math.Max(1, math.Abs(want)) {
			t.Errorf("silu(%v) = %v, want %v", v, out[i], want)
		}
	}
	// Hand values: silu(1) = 1/(1+e^-1) = 0.7310586, silu(-1) = -0.26894142.
	if out[1] != 0.7310586 || out[2] != -0.26894142 {
		t.Errorf("silu(1), silu(-1) = %v, %v", out[1], out[2])
	}
	if err := SiLU(out[:3], x); err == nil {
		t.Error("length mismatch accepted")
	}
}

func TestMulAdd(t *testing.T) {
	a := []float32{1, -2, 3.5}
	b := []float32{4, 0.5, -2}
	out := make([]float32, 3)
	if err := Mul(out, a, b); err != nil {
		t.Fatal(err)
	}
	requireBitwise(t, "mul", out, []float32{4, -1, -7})
	if err := Add(out, a, b); err != nil {
		t.Fatal(err)
	}
	requireBitwise(t, "add", out, []float32{5, -1.5, 1.5})
	if err := Add(a, a, b); err != nil { // in place
		t.Fatal(err)
	}
	requireBitwise(t, "add in place", a, []float32{5, -1.5, 1.5})
	if err := Mul(out, a, b[:2]); err == nil {
		t.Error("Mul accepted a length mismatch")
	}
	if err := Add(out[:2], a, b); err == nil {
		t.Error("Add accepted a short out")
	}
}

// TestConcatSplit joins [2,3,4]-shaped tensors along each axis and checks
// every element against explicit indexing, then splits back.
func TestConcatSplit(t *testing.T) {
	dims := []int{2, 3, 4}
	ext := []int{1, 3, 2} // extents of the three parts along the axis
	for axis := 0; axis < 3; axis++ {
		outer, inner := 1, 1
		for i := 0; i < axis; i++ {
			outer *= dims[i]
		}
		for i := axis + 1; i < 3; i++ {
			inner *= dims[i]
		}
		parts := make([][]float32, len(ext))
		sizes := make([]int, len(ext))
		for p, e := range ext {
			sizes[p] = e * inner
			parts[p] = randSlice(uint64(10*axis+p), outer*e*inner, 1)
		}
		total := 0
		for _, e := range ext {
			total += e
		}
		out := make([]float32, outer*total*inner)
		if err := Concat(out, parts, outer, sizes); err != nil {
			t.Fatal(err)
		}
		for o := 0; o < outer; o++ {
			base := 0
			for p, e := range ext {
				for a := 0; a < e; a++ {
					for i := 0; i < inner; i++ {
						got := out[(o*total+base+a)*inner+i]
						want := parts[p][(o*e+a)*inner+i]
						if got != want {
							t.Fatalf("axis %d: element (%d,%d,%d) of part %d misplaced", axis, o, a, i, p)
						}
					}
				}
				base += e
			}
		}
		back := make([][]float32, len(ext))
		for p := range back {
			back[p] = make([]float32, len(parts[p]))
		}
		if err := Split(back, out, outer, sizes); err != nil {
			t.Fatal(err)
		}
		for p := range back {
			requireBitwise(t, "split", back[p], parts[p])
		}
	}
	if err := Concat(make([]float32, 4), [][]float32{make([]float32, 2)}, 2, []int{1, 1}); err == nil {
		t.Error("parts/sizes count mismatch accepted")
	}
	if err := Split([][]float32{make([]float32, 3)}, make([]float32, 4), 2, []int{2}); err == nil {
		t.Error("short part accepted")
	}
}
