package prep

import (
	"slices"
	"testing"
)

func TestDerive(t *testing.T) {
	a, b := []float32{1, 2, 3, 4}, []float32{5, 6}
	for _, c := range []struct {
		name   string
		op     string
		axis   int
		srcs   [][]float32
		shapes [][]int
		want   []float32 // nil: an error
	}{
		{"concat inner axis", "concat", 1, [][]float32{a, b}, [][]int{{2, 2, 1}, {2, 1, 1}}, []float32{1, 2, 5, 3, 4, 6}},
		{"concat axis -2", "concat", -2, [][]float32{a, b}, [][]int{{2, 2, 1}, {2, 1, 1}}, []float32{1, 2, 5, 3, 4, 6}},
		{"concat outer axis", "concat", 0, [][]float32{a, b}, [][]int{{2, 2}, {1, 2}}, []float32{1, 2, 3, 4, 5, 6}},
		{"reshape", "reshape", 0, [][]float32{a}, [][]int{{4}}, a},
		{"reshape of two", "reshape", 0, [][]float32{a, b}, [][]int{{4}, {2}}, nil},
		{"split", "split", 0, [][]float32{a}, [][]int{{4}}, nil},
		{"axis out of range", "concat", 3, [][]float32{a, b}, [][]int{{2, 2}, {1, 2}}, nil},
		{"outer sizes differ", "concat", 1, [][]float32{a, b}, [][]int{{2, 2}, {1, 2}}, nil},
		{"short source", "concat", 0, [][]float32{a, b[:1]}, [][]int{{2, 2}, {1, 2}}, nil},
		{"no sources", "concat", 0, nil, nil, nil},
	} {
		got, err := Derive(c.op, c.axis, c.srcs, c.shapes)
		switch {
		case c.want == nil && err == nil:
			t.Errorf("%s: no error", c.name)
		case c.want != nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != nil && !slices.Equal(got, c.want):
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
