package gpu

import (
	"reflect"
	"testing"
)

// TestRouteCensusReport: a layer's routes counted over its steps (a
// prefill's chunks), invalid ids routing nowhere, layers in order.
func TestRouteCensusReport(t *testing.T) {
	c := &routeCensus{counts: map[int]map[int32]int{}}
	c.add(3, []int32{0, 1, 1, 7})
	c.add(1, []int32{2, 2, 2, -1})
	c.add(3, []int32{1, 5, -1})
	want := []RouteCensus{{Layer: 1, Routes: 3, Used: 1, Busiest: 3}, {Layer: 3, Routes: 6, Used: 4, Busiest: 3}}
	if got := c.report(); !reflect.DeepEqual(got, want) {
		t.Fatalf("census %+v, want %+v", got, want)
	}
}
