package routes

import (
	"errors"
	"reflect"
	"testing"
)

// TestCensus: a layer's routes counted over its steps (a prefill's
// chunks), invalid ids routing nowhere, layers in order.
func TestCensus(t *testing.T) {
	var c Census
	if got := c.Layers(); len(got) != 0 {
		t.Fatalf("an empty census has layers %+v", got)
	}
	c.Add(3, []int32{0, 1, 1, 7})
	c.Add(1, []int32{2, 2, 2, -1})
	c.Add(3, []int32{1, 5, -1})
	want := []Layer{{Layer: 1, Routes: 3, Used: 1, Busiest: 3, Tiles128: 1, Tiles96: 1, Tiles112: 1}, {Layer: 3, Routes: 6, Used: 4, Busiest: 3, Tiles128: 4, Tiles96: 4, Tiles112: 4}}
	if got := c.Layers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("census %+v, want %+v", got, want)
	}
}

// TestCensusTiles: an expert's routes past a tile's rows take another
// row tile (96 rows: gemm_wgmma_q; 112: its rows=112; 128: gemm_wgmma).
func TestCensusTiles(t *testing.T) {
	for _, c := range []struct {
		routes          []int // of experts 0, 1, ...
		t128, t96, t112 int
	}{
		{[]int{80, 80}, 2, 2, 2},
		{[]int{96, 97}, 2, 3, 2},
		{[]int{112, 113}, 2, 4, 3},
		{[]int{128, 129}, 3, 4, 4},
		{[]int{145, 1, 256, 257}, 2 + 1 + 2 + 3, 2 + 1 + 3 + 3, 2 + 1 + 3 + 3},
	} {
		var ids []int32
		for e, n := range c.routes {
			for range n {
				ids = append(ids, int32(e))
			}
		}
		var cs Census
		cs.Add(0, ids)
		if l := cs.Layers()[0]; l.Tiles128 != c.t128 || l.Tiles96 != c.t96 || l.Tiles112 != c.t112 {
			t.Errorf("routes %v: tiles %d at 128 rows, %d at 96, %d at 112; want %d, %d, %d", c.routes, l.Tiles128, l.Tiles96, l.Tiles112,
				c.t128, c.t96, c.t112)
		}
	}
}

// TestTake: the census is installed for the run alone, the executor reset
// before and after, and a failed run returns its error and no layers.
func TestTake(t *testing.T) {
	var installed *Census
	resets := 0
	install := func(c *Census) { installed = c }
	got, err := Take(install, func() { resets++ }, func() error {
		if installed == nil || resets != 1 {
			t.Fatalf("run with census %v after %d resets", installed, resets)
		}
		installed.Add(2, []int32{4, 4})
		return nil
	})
	if err != nil || !reflect.DeepEqual(got, []Layer{{Layer: 2, Routes: 2, Used: 1, Busiest: 2, Tiles128: 1, Tiles96: 1, Tiles112: 1}}) || installed != nil || resets != 2 {
		t.Fatalf("layers %+v (%v), census left %v, %d resets", got, err, installed, resets)
	}
	if got, err := Take(install, func() {}, func() error { return errors.New("boom") }); err == nil || got != nil || installed != nil {
		t.Fatalf("a failed run gave %+v, %v, census left %v", got, err, installed)
	}
}
