package gpu

import (
	"testing"
	"time"

	"lagc/cuda"
)

// graphTime calls f(0) once (compiling and warming up), captures f(0) ..
// f(reps-1) in a CUDA graph, replays it once more to warm up, then b.N
// times between events, and returns the mean GPU time of one replay: the
// launch gaps are those of graph replay, as in the executor's decode.
func graphTime(b *testing.B, s *cuda.Stream, reps int, f func(i int) error) time.Duration {
	b.Helper()
	if err := f(0); err != nil {
		b.Fatal(err)
	}
	ex := captureExec(b, s, func() error {
		for i := 0; i < reps; i++ {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	})
	dev := s.Device()
	e0, err := dev.NewEvent()
	if err != nil {
		b.Fatal(err)
	}
	defer e0.Close()
	e1, err := dev.NewEvent()
	if err != nil {
		b.Fatal(err)
	}
	defer e1.Close()
	if err := ex.Launch(s); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		if err := s.Record(e0); err != nil {
			b.Fatal(err)
		}
		if err := ex.Launch(s); err != nil {
			b.Fatal(err)
		}
		if err := s.Record(e1); err != nil {
			b.Fatal(err)
		}
		if err := e1.Synchronize(); err != nil {
			b.Fatal(err)
		}
		t, err := cuda.Elapsed(e0, e1)
		if err != nil {
			b.Fatal(err)
		}
		total += t
	}
	return total / time.Duration(b.N)
}

// captureExec captures what record queues on s into a graph and returns
// it instantiated, both closed when the test ends.
func captureExec(tb testing.TB, s *cuda.Stream, record func() error) *cuda.GraphExec {
	tb.Helper()
	g, err := s.Capture(record)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = g.Close() })
	ex, err := g.Instantiate()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ex.Close() })
	return ex
}
