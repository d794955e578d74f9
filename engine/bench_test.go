package engine

import (
	"testing"
	"time"

	"lagc/internal/cputime"
	"lagc/models"
)

// cpuTime is the process's CPU time: on a shared machine it varies much
// less per op than the wall time.
func cpuTime() time.Duration { return cputime.Process() }

// reportCPU adds the CPU time per op since t0 to b's results.
func reportCPU(b *testing.B, t0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-t0)/float64(b.N), "cpu-ns/op")
}

// Benchmarks of the CPU reference on the bundled model (`lagc bench
// --device cpu` reports the same as tok/s).
func openBundledCPU(b *testing.B, maxCtx int) *Model {
	b.Helper()
	dir, err := models.ExtractBundled()
	if err != nil {
		b.Fatal(err)
	}
	m, err := Open(dir, Options{Device: "cpu", MaxContext: maxCtx})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func benchPrompt(n, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*7919 + 13) % vocab)
	}
	return p
}

func BenchmarkCPUDecode(b *testing.B) {
	m := openBundledCPU(b, 1024)
	prompt := benchPrompt(128, m.Config.VocabSize)
	_, next, err := m.Backend.Forward(prompt)
	if err != nil {
		b.Fatal(err)
	}
	tok := next[len(next)-1]
	t0 := cpuTime()
	for b.Loop() {
		if m.Backend.Pos() >= 1000 {
			m.Backend.Reset()
			if _, _, err := m.Backend.Forward(prompt); err != nil {
				b.Fatal(err)
			}
		}
		if _, next, err = m.Backend.Forward([]int32{tok}); err != nil {
			b.Fatal(err)
		}
		tok = next[0]
	}
	reportCPU(b, t0)
}

func BenchmarkCPUPrefill256(b *testing.B) {
	m := openBundledCPU(b, 1024)
	prompt := benchPrompt(256, m.Config.VocabSize)
	t0 := cpuTime()
	for b.Loop() {
		m.Backend.Reset()
		if _, _, err := m.Backend.Forward(prompt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
	reportCPU(b, t0)
}
