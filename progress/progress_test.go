package progress

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock lets tests move time by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }
func newTestBar(w *bytes.Buffer, total int64, unit string) (*Bar, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	b := New(w, "load", total, unit)
	b.now = c.now
	b.start, b.last = c.t, c.t
	return b, c
}

func TestPlainLinesAtMostEveryInterval(t *testing.T) {
	var buf bytes.Buffer
	b, c := newTestBar(&buf, 100<<20, "B")
	if b.term {
		t.Fatal("a bytes.Buffer was taken for a terminal")
	}
	for i := 0; i < 100; i++ { // 100 MiB over 10 s, one Add every 100 ms
		c.step(100 * time.Millisecond)
		b.Add(1 << 20)
	}
	b.Done()
	b.Done()
	b.Add(5)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		"load:  50% 50.0/100.0 MiB, 10.0 MiB/s, ETA 5s",
		"load: 100% 100.0/100.0 MiB, 10.0 MiB/s",
		"load: done, 100.0 MiB in 10s (10.0 MiB/s)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got lines:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
	if strings.ContainsAny(buf.String(), "\r\x1b") {
		t.Error("plain output holds terminal control characters")
	}
}

func TestFormats(t *testing.T) {
	tests := []struct {
		name  string
		total int64
		unit  string
		adds  []int64
		step  time.Duration
		want  string
	}{
		{"count unit", 40, "tensors", []int64{10}, 5 * time.Second, "load:  25% 10/40 tensors, 2 tensors/s, ETA 15s\n"},
		{"unknown total", 0, "B", []int64{3 << 30}, 6 * time.Second, "load: 3.0 GiB, 512.0 MiB/s\n"},
		{"small bytes", 1000, "B", []int64{500}, 5 * time.Second, "load:  50% 500/1000 B, 100 B/s, ETA 5s\n"},
		{"no unit", 10, "", []int64{10}, 5 * time.Second, "load: 100% 10/10, 2/s\n"},
		{"overshoot", 10, "", []int64{15}, 5 * time.Second, "load: 100% 15/10, 3/s\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			b, c := newTestBar(&buf, tc.total, tc.unit)
			c.step(tc.step)
			for _, n := range tc.adds {
				b.Add(n)
			}
			if buf.String() != tc.want {
				t.Errorf("got %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

func TestTerminalRedrawsInPlace(t *testing.T) {
	var buf bytes.Buffer
	b, c := newTestBar(&buf, 8, "layers")
	b.term, b.interval = true, TerminalInterval
	c.step(50 * time.Millisecond)
	b.Add(1) // too soon: no redraw
	if buf.Len() != 0 {
		t.Fatalf("drew before the interval: %q", buf.String())
	}
	c.step(time.Second - 50*time.Millisecond)
	b.Add(1)
	c.step(time.Second)
	b.Add(2)
	b.Done()
	want := "\rload [======                  ]  25% 2/8 layers, 2 layers/s, ETA 3s\x1b[K" +
		"\rload [============            ]  50% 4/8 layers, 2 layers/s, ETA 2s\x1b[K" +
		"\rload: done, 4 layers in 2s (2 layers/s)\x1b[K\n"
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
}

func TestConcurrentAdds(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "convert", 8000, "B")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				b.Add(1)
			}
		}()
	}
	wg.Wait()
	b.Done()
	if !strings.Contains(buf.String(), "done, 7.8 KiB in") {
		t.Errorf("summary %q does not count all 8000 bytes", buf.String())
	}
}
