package lower

import (
	"reflect"
	"testing"
)

// TestFusePairsKeepsEmptySteps: fusePairs joins a pair at the first's
// place and drops the second; a step the join empties becomes nil, and a
// step that was empty before stays as it was, nil or empty (plans are
// compared with reflect.DeepEqual: AtTail's against At's, TestAtTail).
func TestFusePairsKeepsEmptySteps(t *testing.T) {
	a, b, c := Launch{Kernel: "a"}, Launch{Kernel: "b"}, Launch{Kernel: "c"}
	join := func(x, y Launch, _ []Launch) (Launch, bool) {
		if x.Kernel == "a" && y.Kernel == "b" {
			return Launch{Kernel: "ab"}, true
		}
		return Launch{}, false
	}
	for _, tc := range []struct {
		name     string
		in, want [][]Launch
	}{
		{"across an empty step", [][]Launch{{a}, {}, {b}, {c}}, [][]Launch{{{Kernel: "ab"}}, {}, nil, {c}}},
		{"across a nil step", [][]Launch{{a}, nil, {b, c}}, [][]Launch{{{Kernel: "ab"}}, nil, {c}}},
		{"in one step", [][]Launch{{}, {a, b}, nil}, [][]Launch{{}, {{Kernel: "ab"}}, nil}},
		{"nothing to join", [][]Launch{{b}, {}, {a}}, [][]Launch{{b}, {}, {a}}},
	} {
		fusePairs(tc.in, false, join)
		if !reflect.DeepEqual(tc.in, tc.want) {
			t.Errorf("%s: %#v, want %#v", tc.name, tc.in, tc.want)
		}
	}
}
