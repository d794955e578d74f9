package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// persistMoE is one token's routed experts with QMoE's arguments and the
// persistent pair's (lower/persist_moe.go) over the same weights: the pair
// reads QMoE's quantised x (its workspace's first bytes) and writes its own
// activations and output.
type persistMoE struct {
	q QMoEArgs
	p lower.PersistMoEArgs
}

func newPersistMoE(q QMoEArgs, act, out, counters cuda.DevicePtr, grid int) persistMoE {
	l := q.lower()
	return persistMoE{q: q, p: lower.PersistMoEArgs{H: q.H, I: q.I, E: q.E, TopK: q.TopK, XQ: ptr(q.Workspace),
		Weights: ptr(q.Weights), IDs: ptr(q.IDs), Gate: l.Gate, Up: l.Up, Down: l.Down, WType: q.WType, DownType: q.DownType,
		Act: ptr(act), Out: ptr(out), OutType: q.OutType.String(), Accumulate: q.Accumulate, Counters: ptr(counters), Grid: grid}}
}

// launch queues x's quantisation (QMoE's own first launch) and the pair.
func (m persistMoE) launch(k *Kernels, s Queue) error {
	ls, err := lower.QMoE(m.q.lower())
	if err != nil {
		return err
	}
	l, err := lower.PersistMoE(m.p)
	if err != nil {
		return err
	}
	return k.on(s).all([]lower.Launch{ls[0], l}, nil)
}

// TestPersistMoEPairGPU: the persistent pair's output and quantised
// activations equal QMoE's launches' bit for bit, for every type on
// either side (q4_k_m's q6_k downs, iq4_xs files' q8_0 ones), with an invalid route, with and
// without accumulating, at one block an SM and at 7 blocks, eagerly and
// replayed from a graph, each launch leaving its counters zero; S-2.1's widths for q4_k_m's
// types, and for q4_k a shape whose 64 down units leave blocks with
// gate+up groups only.
func TestPersistMoEPairGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(21, 22))
	// every type once on each side, in the pairs checkpoints hold (each
	// pair compiles QMoE's and the pair's kernels: the suite's time)
	pairs := [][2]quant.Type{{quant.Q4_K, quant.Q4_K}, {quant.Q4_K, quant.Q6_K}, {quant.Q5_K, quant.Q5_K}, {quant.IQ4_XS, quant.Q8_0},
		{quant.Q8_0, quant.IQ4_XS}}
	shapes := []struct{ E, H, I, topK int }{{6, 2048, 512, 4}, {16, 3072, 1024, 10}, {6, 512, 1024, 4}}
	for _, pair := range pairs {
		for si, c := range shapes {
			if (si == 1 && pair != [2]quant.Type{quant.Q4_K, quant.Q4_K} && pair != [2]quant.Type{quant.Q4_K, quant.Q6_K}) ||
				(si == 2 && pair != [2]quant.Type{quant.Q4_K, quant.Q4_K}) {
				continue
			}
			qt, dt := pair[0], pair[1]
			t.Run(fmt.Sprintf("%s+%s/H%d_I%d_k%d", qt, dt, c.H, c.I, c.topK), func(t *testing.T) {
				E, H, I, topK := c.E, c.H, c.I, c.topK
				ids := make([]int32, topK)
				wts := make([]float32, topK)
				for i := range ids {
					ids[i] = int32(r.IntN(E))
					wts[i] = r.Float32()
				}
				ids[1] = int32(E) // out of range: contributes nothing, its activations zero
				q := QMoEArgs{T: 1, H: H, I: I, E: E, TopK: topK, WType: qt, DownType: dt, OutType: cuda.BF16, XType: cuda.BF16}
				q.Gate = QMatrix{W: uploadQuant(t, k, s, qt, E*I, H, randQuantBlocks(r, qt, E*I, H)), Total: E * I}
				q.Up = QMatrix{W: uploadQuant(t, k, s, qt, E*I, H, randQuantBlocks(r, qt, E*I, H)), Total: E * I}
				q.Down = QMatrix{W: uploadQuant(t, k, s, dt, E*H, I, randQuantBlocks(r, dt, E*H, I)), Total: E * H}
				q.X = upload(t, k, s, cuda.BF16, randF32(r, H, 1))
				q.IDs = uploadI32(t, k, s, ids)
				q.Weights = upload(t, k, s, cuda.F32, wts)
				init := randF32(r, H, 0.5)
				actBytes := lower.Q8XBytes(topK, I)
				for _, acc := range []bool{false, true} {
					q.Accumulate = acc
					q.Out = upload(t, k, s, cuda.BF16, init)
					q.Workspace = alloc(t, k, QMoEWorkspaceBytes(q))
					if err := k.QMoE(s, q); err != nil {
						t.Fatal(err)
					}
					wantOut := make([]uint16, H)
					if err := cuda.Download(s, wantOut, q.Out); err != nil {
						t.Fatal(err)
					}
					wantAct := make([]byte, actBytes)
					if err := cuda.Download(s, wantAct, q.Workspace.Add(lower.Q8XBytes(1, H))); err != nil {
						t.Fatal(err)
					}
					for _, grid := range []int{k.SMs(), 7} {
						act, out := alloc(t, k, actBytes), alloc(t, k, int64(2*H))
						counters := alloc(t, k, lower.PersistMoECounterBytes)
						if err := s.Memset8(counters, 0, lower.PersistMoECounterBytes); err != nil {
							t.Fatal(err)
						}
						m := newPersistMoE(q, act, out, counters, grid)
						check := func(what string) {
							t.Helper()
							where := fmt.Sprintf("accumulate %v, grid %d, %s", acc, grid, what)
							sameBytes(t, s, where+": out", out, cuda.AsBytes(wantOut))
							// the int8 values, then the scales past their 256-byte boundary
							sc := lower.Q8XBytes(topK, I) - int64(topK*I/32*16)
							sameBytes(t, s, where+": activations", act, wantAct[:topK*I])
							sameBytes(t, s, where+": activation scales", act.Add(sc), wantAct[sc:])
						}
						reset := func() {
							uploadTo(t, s, out, cuda.BF16, init)
							poison(t, s, act, actBytes)
						}
						for e := 0; e < 2; e++ {
							reset()
							if err := m.launch(k, s); err != nil {
								t.Fatal(err)
							}
							check(fmt.Sprintf("eager launch %d", e))
						}
						ex := captureExec(t, s, func() error { return m.launch(k, s) })
						for e := 0; e < 2; e++ {
							reset()
							if err := ex.Launch(s); err != nil {
								t.Fatal(err)
							}
							check(fmt.Sprintf("graph replay %d", e))
						}
						ctr := make([]uint32, 2)
						if err := cuda.Download(s, ctr, counters); err != nil {
							t.Fatal(err)
						}
						if ctr[0] != 0 || ctr[1] != 0 {
							t.Errorf("counters after 4 launches: %v; every launch leaves them zero", ctr)
						}
					}
				}
			})
		}
	}
}

// BenchmarkPersistMoE: one decode token's routed experts at S-2.1's shapes
// (top-10 of 256, H 3072, I 1024; q4_k, and q4_k_m's q6_k downs) as QMoE's
// launches (x's quantisation, gate+up, down; programmatic launch), as
// those in the decode plan's forms (launches_pre: lower.DownPre's
// moe_gateup_qgemv_trig and moe_down_qgemv_pre) and as x's quantisation
// and the persistent pair,
// each from a CUDA graph of 16 tokens routed to 16 different sets of
// experts (their weights from HBM). Reports microseconds a token and the
// ten experts' GB/s.
//
//	./exec__gpu.test -test.run '^$' -test.bench PersistMoE -test.count 3
func BenchmarkPersistMoE(b *testing.B) {
	m := newMMBench(b)
	m.s.SetProgrammaticLaunch(true)
	r := rand.New(rand.NewPCG(5, 6))
	const E, K, H, I, sets, reps = 256, 10, 3072, 1024, 16, 16
	for _, pair := range [][2]quant.Type{{quant.Q4_K, quant.Q4_K}, {quant.Q4_K, quant.Q6_K}} {
		qt, dt := pair[0], pair[1]
		q, idp, wtp, bytes := m.routedExperts(r, qt, dt, E, K, H, I, sets, lower.QMoEForce{})
		counters := m.upload(make([]byte, lower.PersistMoECounterBytes))
		act := m.rand(int(lower.Q8XBytes(K, I) / 2))
		for _, mode := range []string{"launches", "launches_pre", "persist"} {
			b.Run(fmt.Sprintf("%s+%s/%s", qt, dt, mode), func(b *testing.B) {
				run := func(i int) error {
					a := q
					a.IDs, a.Weights = idp.Add(int64(4*K*(i%sets))), wtp.Add(int64(4*K*(i%sets)))
					switch mode {
					case "launches":
						return m.k.QMoE(m.s, a)
					case "launches_pre":
						ls, err := lower.QMoE(a.lower())
						if err != nil {
							return err
						}
						g, d, err := lower.DownPre(ls[1], ls[2])
						if err != nil {
							return err
						}
						return m.k.on(m.s).all([]lower.Launch{ls[0], g, d}, nil)
					}
					return newPersistMoE(a, act, a.Out, counters, m.k.SMs()).launch(m.k, m.s)
				}
				d := graphTime(b, m.s, reps, run)
				b.ReportMetric(d.Seconds()*1e6/reps, "us/token")
				b.ReportMetric(bytes/(d.Seconds()/reps)/1e9, "GB/s")
			})
		}
	}
}

// sameBytes fails t unless the len(want) bytes at p are want.
func sameBytes(t *testing.T, s *cuda.Stream, what string, p cuda.DevicePtr, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if err := cuda.Download(s, got, p); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d = %#02x, the launches give %#02x", what, i, got[i], want[i])
		}
	}
}
