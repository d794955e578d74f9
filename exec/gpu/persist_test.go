package gpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
	"lagc/lower"
	"lagc/quant"
)

// persistChain is a chain of dependent quantised GEMVs (Q8_0 unless
// said) on the device (lower/persist.go): sets copies of its weights, each
// set's GEMVs writing their own y buffers, so results can be compared GEMV
// by GEMV and the weights need not stay in L2 between calls.
type persistChain struct {
	k        *Kernels
	x        cuda.DevicePtr
	sets     []lower.PersistChainArgs
	nw, spl  int
	counters cuda.DevicePtr
}

// persistShapes are the chains measured: GEMVs alternating between two
// shapes [N, K] (each one's N the next one's K).
var persistShapes = []struct {
	name string
	a, b [2]int // [N, K]
}{
	{"1024x2048", [2]int{1024, 2048}, [2]int{2048, 1024}}, // 2.2 MB a GEMV, as small as the shared expert's
	{"2048x2048", [2]int{2048, 2048}, [2]int{2048, 2048}}, // 4.5 MB
}

// (qgemv_xin, the launches' kernel, quantises x in every block and takes K
// up to lower.QGEMVXInMax = 2048: both forms then do the same work.)

func newPersistChain(tb testing.TB, k *Kernels, s *cuda.Stream, shape [2][2]int, n, sets, grid int) *persistChain {
	tb.Helper()
	return newPersistChainOf(tb, k, s, quant.Q8_0, shape, n, sets, grid)
}

func newPersistChainOf(tb testing.TB, k *Kernels, s *cuda.Stream, t quant.Type, shape [2][2]int, n, sets, grid int) *persistChain {
	tb.Helper()
	c := &persistChain{k: k}
	r := rand.New(rand.NewPCG(41, 42))
	c.x = upload(tb, k, s, cuda.BF16, randF32(r, shape[0][1], 0.5))
	c.counters = alloc(tb, k, lower.PersistCounterBytes(n))
	if err := s.Memset8(c.counters, 0, lower.PersistCounterBytes(n)); err != nil {
		tb.Fatal(err)
	}
	for set := 0; set < sets; set++ {
		a := lower.PersistChainArgs{X: ptr(c.x), Counters: ptr(c.counters), Grid: grid}
		for g := 0; g < n; g++ {
			N, K := shape[g%2][0], shape[g%2][1]
			wb, err := lower.QuantDeviceBytes(t, N, K)
			if err != nil {
				tb.Fatal(err)
			}
			w := alloc(tb, k, wb)
			if err := k.QSynth(s, t, w, N, K, uint32(100*set+g+1)); err != nil {
				tb.Fatal(err)
			}
			y := alloc(tb, k, int64(2*N))
			poison(tb, s, y, int64(2*N))
			a.GEMVs = append(a.GEMVs, lower.QGEMVArgs{T: 1, K: K, N: N, W: ptr(w), Y: ptr(y), WType: t, WRows: N, YType: "bf16"})
		}
		table, err := lower.EncodePersistChain(a)
		if err != nil {
			tb.Fatal(err)
		}
		a.Table = ptr(alloc(tb, k, int64(len(table))))
		if err := s.CopyHtoD(cuda.DevicePtr(a.Table.Offset), table); err != nil {
			tb.Fatal(err)
		}
		if c.nw, c.spl, err = lower.PersistChainShape(a); err != nil {
			tb.Fatal(err)
		}
		c.sets = append(c.sets, a)
	}
	return c
}

// launches queues set i's GEMVs as qgemv_xin launches of the chain's shape.
func (c *persistChain) launches(s *cuda.Stream, i int) error {
	a := c.sets[i]
	for g, q := range a.GEMVs {
		x := a.X
		if g > 0 {
			x = a.GEMVs[g-1].Y
		}
		q.RowsPerWarp, q.Split = c.nw, c.spl
		if err := c.k.on(s).one(lower.QGEMVXIn(q, x, "bf16")); err != nil {
			return err
		}
	}
	return nil
}

// persistent queues set i's chain as one persistent launch.
func (c *persistChain) persistent(s *cuda.Stream, i int) error {
	return c.k.on(s).one(lower.PersistQGEMVChain(c.sets[i]))
}

// ys reads set i's outputs, GEMV by GEMV.
func (c *persistChain) ys(tb testing.TB, s *cuda.Stream, i int) [][]uint16 {
	var out [][]uint16
	for _, g := range c.sets[i].GEMVs {
		h := make([]uint16, g.N)
		if err := cuda.Download(s, h, cuda.DevicePtr(g.Y.Offset)); err != nil {
			tb.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// TestPersistQGEMVChainGPU: the persistent chain's every y equals the
// qgemv_xin launches' bit for bit, eagerly and replayed from a graph over
// several epochs, at one and two blocks an SM and with fewer blocks than a
// GEMV has units.
func TestPersistQGEMVChainGPU(t *testing.T) {
	k, s := gpu(t)
	sms := k.SMs()
	for _, sh := range persistShapes {
		for _, grid := range []int{sms, lower.PersistChainMaxBlocksPerSM * sms, 7} {
			t.Run(fmt.Sprintf("%s/grid%d", sh.name, grid), func(t *testing.T) {
				c := newPersistChain(t, k, s, [2][2]int{sh.a, sh.b}, 6, 1, grid)
				c.sets[0].Prefetch = grid != 2*sms // both forms; the prefetch on the largest and smallest grids
				if err := c.launches(s, 0); err != nil {
					t.Fatal(err)
				}
				want := c.ys(t, s, 0)
				for _, y := range c.sets[0].GEMVs { // the chain must write every y
					poison(t, s, cuda.DevicePtr(y.Y.Offset), int64(2*y.N))
				}
				check := func(what string) {
					t.Helper()
					got := c.ys(t, s, 0)
					for g := range want {
						for i := range want[g] {
							if got[g][i] != want[g][i] {
								t.Fatalf("%s: GEMV %d y[%d] = %#04x, the launches give %#04x", what, g, i, got[g][i], want[g][i])
							}
						}
					}
				}
				for e := 0; e < 3; e++ {
					if err := c.persistent(s, 0); err != nil {
						t.Fatal(err)
					}
					check(fmt.Sprintf("eager launch %d", e))
				}
				ex := captureExec(t, s, func() error { return c.persistent(s, 0) })
				for e := 0; e < 3; e++ {
					if err := ex.Launch(s); err != nil {
						t.Fatal(err)
					}
					check(fmt.Sprintf("graph replay %d", e))
				}
				ctr := make([]uint32, 2)
				if err := cuda.Download(s, ctr, c.counters); err != nil {
					t.Fatal(err)
				}
				if ctr[0] != 6 || ctr[1] != uint32(6*grid) {
					t.Errorf("counters after 6 launches: epoch %d, arrivals %d; want 6 and %d", ctr[0], ctr[1], 6*grid)
				}
			})
		}
	}
}

// BenchmarkPersistBoundary measures what a launch boundary costs in
// decode: 8 dependent Q8_0 GEMVs as 8 qgemv_xin launches (with and without
// programmatic launch, the decode plan's boundary) and as one persistent
// launch with counters between them (at 1 and 2 blocks an SM; _pre: each
// block's first weights asked of L2 before its wait), each from a CUDA
// graph of 16 chains cycling through 4 weight sets (more than L2); then
// q4_k chains (the routed experts' type) as launches with programmatic
// launch and the chain. Reports microseconds a GEMV.
//
//	./exec__gpu.test -test.run '^$' -test.bench PersistBoundary -test.count 3
func BenchmarkPersistBoundary(b *testing.B) {
	dev := cudatest.Device(b)
	k := NewKernels(dev)
	const n, sets, reps = 8, 4, 16
	type form struct {
		t    quant.Type
		mode string
	}
	var forms []form
	for _, mode := range []string{"launches", "launches_pdl", "persist_1", "persist_2", "persist_1_pre", "persist_2_pre"} {
		forms = append(forms, form{quant.Q8_0, mode})
	}
	for _, mode := range []string{"launches_pdl", "persist_1"} {
		forms = append(forms, form{quant.Q4_K, mode})
	}
	for _, sh := range persistShapes {
		for _, f := range forms {
			mode := f.mode
			name := sh.name + "/" + mode
			if f.t != quant.Q8_0 {
				name = sh.name + "/" + f.t.String() + "/" + mode
			}
			b.Run(name, func(b *testing.B) {
				s, err := dev.NewStream()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				grid := k.SMs()
				if strings.HasPrefix(mode, "persist_2") {
					grid *= 2
				}
				c := newPersistChainOf(b, k, s, f.t, [2][2]int{sh.a, sh.b}, n, sets, grid)
				for i := range c.sets {
					c.sets[i].Prefetch = strings.HasSuffix(mode, "_pre")
				}
				s.SetProgrammaticLaunch(mode != "launches")
				run := func(i int) error {
					if mode == "launches" || mode == "launches_pdl" {
						return c.launches(s, i%sets)
					}
					return c.persistent(s, i%sets)
				}
				b.ReportMetric(graphTime(b, s, reps, run).Seconds()*1e6/(reps*n), "us/GEMV")
			})
		}
	}
}

// BenchmarkGraphBranches measures the other way to overlap what a decode
// layer runs one after another: two independent chains of qgemv_xin
// launches (2 GEMVs of 4.5 MB, about a routed expert pass, and 2 of 2.2
// MB, about the shared expert) queued on one stream ("serial") or on two
// streams forked and joined through events inside one captured graph
// ("branches"), programmatic launch on both streams, 16 pairs a graph over
// 4 weight sets. Reports microseconds a pair.
//
//	./exec__gpu.test -test.run '^$' -test.bench GraphBranches -test.count 3
func BenchmarkGraphBranches(b *testing.B) {
	dev := cudatest.Device(b)
	k := NewKernels(dev)
	const sets, reps = 4, 16
	for _, mode := range []string{"serial", "branches"} {
		b.Run(mode, func(b *testing.B) {
			var ss [2]*cuda.Stream
			for i := range ss {
				s, err := dev.NewStream()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				s.SetProgrammaticLaunch(true)
				ss[i] = s
			}
			var evs [2]*cuda.Event
			for i := range evs {
				e, err := dev.NewEvent()
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				evs[i] = e
			}
			long := newPersistChain(b, k, ss[0], [2][2]int{{2048, 2048}, {2048, 2048}}, 2, sets, k.SMs())
			short := newPersistChain(b, k, ss[0], [2][2]int{{1024, 2048}, {2048, 1024}}, 2, sets, k.SMs())
			run := func(i int) error {
				if mode == "serial" {
					if err := long.launches(ss[0], i%sets); err != nil {
						return err
					}
					return short.launches(ss[0], i%sets)
				}
				// fork: the second stream waits for what the first queued so far
				if err := ss[0].Record(evs[0]); err != nil {
					return err
				}
				if err := ss[1].WaitEvent(evs[0]); err != nil {
					return err
				}
				if err := short.launches(ss[1], i%sets); err != nil {
					return err
				}
				if err := long.launches(ss[0], i%sets); err != nil {
					return err
				}
				// join
				if err := ss[1].Record(evs[1]); err != nil {
					return err
				}
				return ss[0].WaitEvent(evs[1])
			}
			b.ReportMetric(graphTime(b, ss[0], reps, run).Seconds()*1e6/reps, "us/pair")
		})
	}
}
