package cpu

import (
	"math"
	"testing"
)

func TestArgMax(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		row  []float32
		want int32
	}{
		{"single", []float32{-3}, 0},
		{"last", []float32{1, 2, 3}, 2},
		{"first of ties", []float32{1, 5, 2, 5, 5}, 1},
		{"all equal", []float32{7, 7, 7}, 0},
		{"negative", []float32{-5, -1, -2}, 1},
		{"inf", []float32{1, inf, inf}, 1},
		{"nan wins", []float32{1, nan, 9, nan}, 1},
		{"-inf only", []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
	} {
		out := make([]int32, 1)
		if err := ArgMax(out, tc.row, 1, len(tc.row)); err != nil {
			t.Fatal(err)
		}
		if out[0] != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, out[0], tc.want)
		}
	}
	// Several rows at once.
	x := []float32{0, 1, 0, 3, 2, 3, 9, -1, 9}
	out := make([]int32, 3)
	if err := ArgMax(out, x, 3, 3); err != nil {
		t.Fatal(err)
	}
	if out[0] != 1 || out[1] != 0 || out[2] != 0 {
		t.Fatalf("rows: got %v, want [1 0 0]", out)
	}
	if err := ArgMax(make([]int32, 2), x, 3, 3); err == nil {
		t.Error("short out accepted")
	}
}
