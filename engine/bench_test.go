package engine

import (
	"testing"

	"lagc/models"
)

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
}

func BenchmarkCPUPrefill256(b *testing.B) {
	m := openBundledCPU(b, 1024)
	prompt := benchPrompt(256, m.Config.VocabSize)
	for b.Loop() {
		m.Backend.Reset()
		if _, _, err := m.Backend.Forward(prompt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
}
