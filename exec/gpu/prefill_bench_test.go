package gpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/quant"
)

// BenchmarkPrefillKernels times, one launch at a time, the prefill kernels
// of a 2048-token S-2.1 chunk that the eager profile (lagc bench
// --profile) times between events, where a small kernel's figure carries
// its launch: the norms, the router's selection, and each of the routed
// experts' launches (routing, gather, grouped GEMMs, combine) with bf16
// and q4_k stacks, by kernel name. Each sub-benchmark reruns one launch
// on its own inputs (the MoE's launches after one whole run, so the
// schedule they read is in place); GB/s counts the bytes the launch must
// read and write at least where that is simple, else 0.
func BenchmarkPrefillKernels(b *testing.B) {
	m := newMMBench(b)
	const T, H, E, K, I = 2048, 3072, 256, 10, 1024
	const eps = 1e-6
	x, y, sum := m.rand(T*H), m.rand(T*H), m.rand(T*H)
	w := m.rand(2 * H) // H floats
	rowBytes := float64(T * H * 2)
	b.Run("rms_norm", func(b *testing.B) {
		m.run(b, 2*rowBytes, 0, func() error { return m.k.RMSNorm(m.s, cuda.BF16, y, x, w, T, H, eps) })
	})
	b.Run("add_rms_norm", func(b *testing.B) {
		m.run(b, 4*rowBytes, 0, func() error {
			return m.k.AddRMSNorm(m.s, cuda.BF16, cuda.BF16, sum, y, x, sum, w, T, H, eps)
		})
	})
	logits := m.rand(2 * T * E) // f32 [T, E]
	wts, ids := m.rand(2*T*K), m.rand(2*T*K)
	b.Run("router_topk", func(b *testing.B) {
		m.run(b, float64(T*E*4), 0, func() error {
			return m.k.RouterTopK(m.s, cuda.F32, wts, ids, logits, 0, T, E, K, 0, 1)
		})
	})

	r := rand.New(rand.NewPCG(5, 6))
	gate, down := m.rand(2*E*I*H), m.rand(E*H*I)
	for _, qt := range []string{"bf16", "q4_k"} {
		rids, rwts := benchRoutes(r, T, E, K)
		a := MoEArgs{T: T, H: H, I: I, E: E, TopK: K, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
			X: x, Out: y, Order: ExpertsByLoad, CC: 90, SMs: m.k.SMs()}
		if qt == "bf16" {
			a.Gate, a.Up, a.Down = gate, gate.Add(2*E*I*H), down
		} else {
			a.WQuant = quant.Q4_K
			a.QGate, a.QUp, a.QDown, _ = m.quantStacks(quant.Q4_K, E, H, I)
		}
		m.routes(b, &a, rids, rwts)
		if err := m.k.MoEExperts(m.s, a); err != nil { // the schedule in place
			b.Fatal(err)
		}
		ls, err := m.k.MoELaunches(a)
		if err != nil {
			b.Fatal(err)
		}
		for i, l := range ls {
			name := l.Name
			if j := strings.IndexByte(name, '<'); j >= 0 {
				name = name[:j]
			}
			b.Run(fmt.Sprintf("moe-%s/%d-%s", qt, i, name), func(b *testing.B) {
				m.run(b, 0, 0, func() error { return l.Launch(m.s) })
			})
		}
	}
}
