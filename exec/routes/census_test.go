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
	want := []Layer{{Layer: 1, Routes: 3, Used: 1, Busiest: 3}, {Layer: 3, Routes: 6, Used: 4, Busiest: 3}}
	if got := c.Layers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("census %+v, want %+v", got, want)
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
	if err != nil || !reflect.DeepEqual(got, []Layer{{Layer: 2, Routes: 2, Used: 1, Busiest: 2}}) || installed != nil || resets != 2 {
		t.Fatalf("layers %+v (%v), census left %v, %d resets", got, err, installed, resets)
	}
	if got, err := Take(install, func() {}, func() error { return errors.New("boom") }); err == nil || got != nil || installed != nil {
		t.Fatalf("a failed run gave %+v, %v, census left %v", got, err, installed)
	}
}
