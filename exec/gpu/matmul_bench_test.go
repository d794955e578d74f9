package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
	"lagc/lower"
	"lagc/quant"
)

// Benchmarks at Laguna-S-2.1 shapes, bf16. They report GB/s (weights and
// activations moved) and TFLOP/s; `lagc kernel-bench` gives the same
// figures with CUDA-event timing and roofline fractions.
//
//	go test -c -o lagc-cuda.test ./exec/gpu && ./lagc-cuda.test -test.run '^$' -test.bench 'MatMul|MoE'

// mmBench gives a benchmark the device, a stream and bf16 random memory.
type mmBench struct {
	b       *testing.B
	k       *Kernels
	s       *cuda.Stream
	pattern cuda.DevicePtr // mmPatternBytes of random bf16
}

const mmPatternBytes = 64 << 20

func newMMBench(b *testing.B) *mmBench {
	dev := cudatest.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	m := &mmBench{b: b, k: NewKernels(dev), s: s}
	r := rand.New(rand.NewPCG(9, 9))
	h := make([]uint16, mmPatternBytes/2)
	for i := range h {
		h[i] = cuda.F32ToBF16((r.Float32()*2 - 1) * 0.05)
	}
	m.pattern = m.upload(cuda.AsBytes(h))
	return m
}

// rand allocates n bf16 values, random in [-0.05, 0.05) (a 64 MiB random
// pattern repeated: generating gigabytes on the host would take longer
// than the benchmark).
func (m *mmBench) rand(n int) cuda.DevicePtr {
	bytes := int64(2 * n)
	p, err := m.k.Dev.Alloc(bytes)
	if err != nil {
		m.b.Fatal(err)
	}
	m.b.Cleanup(func() { _ = m.k.Dev.Free(p) })
	for off := int64(0); off < bytes; off += mmPatternBytes {
		if err := m.s.CopyDtoD(p.Add(off), m.pattern, min(mmPatternBytes, bytes-off)); err != nil {
			m.b.Fatal(err)
		}
	}
	return p
}

// run times f over b.N calls and reports rates for bytes and flops per call.
func (m *mmBench) run(b *testing.B, bytes, flops float64, f func() error) {
	if err := f(); err != nil { // compile and warm up
		b.Fatal(err)
	}
	if err := m.s.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	if err := m.s.Synchronize(); err != nil {
		b.Fatal(err)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(bytes/sec/1e9, "GB/s")
	b.ReportMetric(flops/sec/1e12, "TFLOP/s")
}

// BenchmarkMatMul: weights under the L2 size (o_proj, dense_down) are
// partly served from L2 across iterations; kernel-bench cycles copies.
func BenchmarkMatMul(b *testing.B) {
	m := newMMBench(b)
	sh := s21(b)
	type run struct {
		benchShape
		T int
	}
	for _, c := range []run{
		{sh.lmHead, 1}, {sh.qkvg, 1}, {sh.oProj, 1}, {sh.denseGateUp, 1}, {sh.denseDown, 1},
		{sh.qkvg, 2048}, {sh.denseGateUp, 2048}, {sh.denseDown, 2048},
	} {
		b.Run(fmt.Sprintf("%s/T=%d", c.name, c.T), func(b *testing.B) {
			rows := c.N
			if c.swiglu {
				rows *= 2
			}
			a := MatMulArgs{T: c.T, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16, SwiGLU: c.swiglu,
				X: m.rand(c.T * c.K), W: m.rand(rows * c.K), Y: m.rand(c.T * c.N)}
			bytes := 2 * float64(rows*c.K+c.T*(c.K+c.N))
			m.run(b, bytes, 2*float64(c.T)*float64(rows)*float64(c.K), func() error { return m.k.MatMul(m.s, a) })
		})
	}
}

func BenchmarkMoEExperts(b *testing.B) {
	m := newMMBench(b)
	r := rand.New(rand.NewPCG(3, 4))
	const E, K, H, I = 256, 10, 3072, 1024
	gate, down := m.rand(2*E*I*H), m.rand(E*H*I) // gate stack, then up: the wgmma path's layout
	up := gate.Add(2 * E * I * H)
	for _, T := range []int{1, 512, 2048} {
		for _, v := range []struct {
			name string
			cc   int
			down lower.HopperSched
			q    bool // on gemm_wgmma_q (QMoE.BF16)
		}{{name: "mma"}, {name: "wgmma", cc: 90}, {name: "wgmma-downpp", cc: 90, down: lower.SchedPingPong},
			{name: "wgmma-q", cc: 90, q: true}} {
			if T == 1 && v.cc != 0 {
				continue // decode: the same GEMVs either way
			}
			b.Run(fmt.Sprintf("T=%d/%s", T, v.name), func(b *testing.B) {
				ids, wts := benchRoutes(r, T, E, K)
				a := MoEArgs{T: T, H: H, I: I, E: E, TopK: K, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
					X: m.rand(T * H), Out: m.rand(T * H), Gate: gate, Up: up, Down: down, Order: ExpertsByLoad,
					CC: v.cc, SMs: m.k.SMs(), HopperDown: v.down, QMoE: lower.QMoEForce{BF16: v.q, NoBF16: !v.q}}
				m.routes(b, &a, ids, wts)
				// Decode reads the k selected experts (repeats across tokens counted again).
				bytes := float64(min(T*K, E)) * 3 * I * H * 2
				m.run(b, bytes, 2*float64(T*K)*3*I*H, func() error { return m.k.MoEExperts(m.s, a) })
			})
		}
	}
}

// quantStacks are synthetic routed-expert stacks of qt blocks for E
// experts of hidden size H and intermediate I, as MoEArgs takes them
// (gate then up in one matrix), and their bytes.
func (m *mmBench) quantStacks(qt quant.Type, E, H, I int) (gate, up, down QMatrix, bytes int64) {
	gub, _ := lower.QuantDeviceBytes(qt, 2*E*I, H)
	db, _ := lower.QuantDeviceBytes(qt, E*H, I)
	gu, dn := m.rand(int(gub/2)), m.rand(int(db/2))
	if err := m.k.QSynth(m.s, qt, gu, 2*E*I, H, 1); err != nil {
		m.b.Fatal(err)
	}
	if err := m.k.QSynth(m.s, qt, dn, E*H, I, 2); err != nil {
		m.b.Fatal(err)
	}
	return QMatrix{W: gu, Total: 2 * E * I}, QMatrix{W: gu, Total: 2 * E * I, Row0: E * I}, QMatrix{W: dn, Total: E * H}, gub + db
}

// routes puts a MoE bench's routes (ids, wts) and a workspace of the size
// a needs on the device, into a.
func (m *mmBench) routes(b *testing.B, a *MoEArgs, ids []int32, wts []float32) {
	a.IDs = m.upload(cuda.AsBytes(ids))
	a.Weights = m.upload(cuda.AsBytes(wts))
	ws, err := MoEWorkspaceBytes(*a)
	if err != nil {
		b.Fatal(err)
	}
	a.Workspace = m.rand(int(ws / 2))
}

func (m *mmBench) upload(b []byte) cuda.DevicePtr {
	p, err := m.k.Dev.Alloc(int64(len(b)))
	if err != nil {
		m.b.Fatal(err)
	}
	m.b.Cleanup(func() { _ = m.k.Dev.Free(p) })
	if err := m.s.CopyHtoD(p, b); err != nil {
		m.b.Fatal(err)
	}
	return p
}
