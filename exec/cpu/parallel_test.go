package cpu

import (
	"sync/atomic"
	"testing"
)

func TestParallelForVisitsEachItemOnce(t *testing.T) {
	for _, tc := range []struct{ n, work, threads int }{
		{1, 1, 4}, {7, 1 << 20, 4}, {100, 1 << 20, 3}, {1000, 1, 8}, {1001, 1 << 12, 2}, {5, 1 << 20, 1},
	} {
		counts := make([]atomic.Int32, tc.n)
		withThreads(tc.threads, func() {
			parallelFor(tc.n, tc.work, func(lo, hi int) {
				if lo < 0 || hi > tc.n || lo >= hi {
					t.Errorf("n=%d: bad chunk [%d,%d)", tc.n, lo, hi)
					return
				}
				for i := lo; i < hi; i++ {
					counts[i].Add(1)
				}
			})
		})
		for i := range counts {
			if c := counts[i].Load(); c != 1 {
				t.Fatalf("n=%d threads=%d: item %d visited %d times", tc.n, tc.threads, i, c)
			}
		}
	}
	parallelFor(0, 1, func(lo, hi int) { t.Fatal("called for n = 0") })
}

func TestThreadsSetting(t *testing.T) {
	withThreads(3, func() {
		if Threads() != 3 {
			t.Fatalf("Threads() = %d after SetMaxThreads(3)", Threads())
		}
	})
	if Threads() < 1 {
		t.Fatalf("default Threads() = %d", Threads())
	}
}
