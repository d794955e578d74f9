package lower

import "testing"

func TestSpanOverlaps(t *testing.T) {
	a := Ptr{BaseArena, 100}
	for _, c := range []struct {
		name string
		s, o span
		want bool
	}{
		{"same", span{a, 8}, span{a, 8}, true},
		{"touching after", span{a, 8}, span{a.At(8), 8}, false},
		{"touching before", span{a.At(8), 8}, span{a, 8}, false},
		{"one byte", span{a, 9}, span{a.At(8), 8}, true},
		{"inside", span{a, 64}, span{a.At(10), 1}, true},
		{"other allocation", span{a, 64}, span{Ptr{BaseWorkspace, 100}, 64}, false},
		{"empty", span{a.At(4), 0}, span{a, 8}, false},
		{"the gap between rows", rowsRange(a, 2, 16, 4, 2), span{a.At(8), 24}, true},
		{"rows' second row", rowsRange(a, 2, 16, 4, 2), span{a.At(32), 1}, true},
		{"past the last row", rowsRange(a, 2, 16, 4, 2), span{a.At(40), 8}, false},
	} {
		if got := c.s.overlaps(c.o); got != c.want {
			t.Errorf("%s: %v overlaps %v = %v, want %v", c.name, c.s, c.o, got, c.want)
		}
	}
}

func TestClash(t *testing.T) {
	a := Ptr{BaseArena, 0}
	writes := []span{{a, 16}, {a.At(64), 16}}
	if w, ok := clash(writes, []span{{a.At(32), 16}, {Ptr{}, 1 << 40}}); ok {
		t.Errorf("clash reported %v: the uses are apart or null", w)
	}
	if w, ok := clash(writes, []span{{a.At(70), 2}, {a.At(4), 2}}); !ok || w != writes[0] {
		t.Errorf("clash = %v, %v; want the first write, %v", w, ok, writes[0])
	}
}
