package lower

// The launch fusions prove that what one launch writes is not what another
// reads or writes by comparing byte extents of the program's allocations:
// one type for them, here.

// span is the n bytes at at.
type span struct {
	at Ptr
	n  int64
}

// bytesAt is the n bytes from p.
func bytesAt(p Ptr, n int64) span { return span{p, n} }

// rowsRange is the bytes of t rows of w elements of es bytes, ld apart,
// from p: the first row's first byte to the last row's last, the gaps
// between rows included.
func rowsRange(p Ptr, t, ld, w, es int64) span { return span{p, es * ((t-1)*ld + w)} }

// overlaps reports whether s and o share a byte.
func (s span) overlaps(o span) bool { return overlaps(s.at, s.n, o.at, o.n) }

// overlaps reports whether [a, a+an) and [b, b+bn) share a byte (an empty
// range shares none).
func overlaps(a Ptr, an int64, b Ptr, bn int64) bool {
	return a.Base == b.Base && an > 0 && bn > 0 && a.Offset < b.Offset+bn && b.Offset < a.Offset+an
}

// clash is the first of writes that shares a byte with one of uses (null
// pointers in uses are unused arguments and share nothing).
func clash(writes, uses []span) (span, bool) {
	for _, w := range writes {
		for _, u := range uses {
			if !u.at.Null() && w.overlaps(u) {
				return w, true
			}
		}
	}
	return span{}, false
}
