package gpu

import (
	"fmt"
	"math"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// attention_gate's kernels, and the split decode attention's merge in the
// launch: the last block of each (row, kv head, block of heads) to finish,
// counted on a counter it sets back to zero. Besides matching the CPU,
// two properties depend on that merge: each row of a batched step has the
// bits it has alone, and a captured graph replays (twice in a row: a
// counter left non-zero would stop the second launch's merge).

// TestAttentionGateGPU: attention_gate's kernels (the attention with its
// output gate applied as it writes) against cpu.Attention then
// cpu.SoftplusGate, over a table of shapes: Laguna-S-2.1's sliding layer
// (GQA 9, a 512-slot ring that wraps) and full layer (GQA 6, a 4096-slot
// cache split DecodeSplits ways, at a context shorter than one split, so
// most splits are empty, and at one of many tiles per split); per-head and
// per-element gates; forced split counts; two blocks of query heads per kv
// head (each merging its own splits); head_dim 6, whose partials the merge
// reads element by element; no split. Each case prefills a gated chunk
// (the tensor-core kernel in bf16 at head_dim 64 and 128), fills history,
// then decodes gated steps, alternately appending k, v in the attention
// kernel and with KVAppend before it.
func TestAttentionGateGPU(t *testing.T) {
	k, s := gpu(t)
	cases := []struct {
		name                    string
		nh, nkv, d, window, max int // max: the cache's positions (the slots of a full layer)
		chunk, hist, spl        int
		perElement              bool
	}{
		{"s21-sliding-g9-wrap", 72, 8, 128, 512, 4096, 37, 600, 0, false},
		{"s21-full-g6-shorter-than-a-split", 48, 8, 128, 0, 4096, 5, 10, 0, false},
		{"s21-full-g6-many-tiles-a-split", 48, 8, 128, 0, 4096, 37, 1300, 0, false},
		{"g9-d128-win16-per-element-split3", 18, 2, 128, 16, 200, 20, 30, 3, true},
		{"g20-d64-two-head-blocks-split5", 40, 2, 64, 0, 200, 9, 100, 5, false},
		{"g2-d6-win9-per-element-split2", 4, 2, 6, 9, 100, 7, 30, 2, true},
		{"g4-d40-nosplit", 8, 2, 40, 0, 50, 6, 20, 1, false},
		{"g1-d64-second-token-split4", 4, 4, 64, 0, 64, 1, 0, 4, true},
	}
	for ci, c := range cases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				G := c.nh
				if c.perElement {
					G = c.nh * c.d
				}
				a := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, c.max, c.chunk, uint64(200+ci)).withGate(G)
				got, want := a.prefill(c.chunk)
				checkClose(t, "prefill chunk", got, want, attnTol(dt))
				a.fill(c.hist)
				for step := 0; step < 3; step++ {
					got, want := a.decodeStep(c.spl, step%2 == 0)
					checkClose(t, fmt.Sprintf("decode step %d", step), got, want, attnTol(dt))
				}
			})
		}
	}
}

// TestAttentionDecodeRowsGPU: batched decode steps of 5 rows over 3
// sequence slots with different histories (one empty, one past a ring's
// wrap), 2 rows padding (slot -1), gated, against cpu.Attention then
// cpu.SoftplusGate per row; every row, run again alone (one row, its own
// slot), gives the same bits, and padding rows are zeros. Two steps in a
// row, so the second finds every row's counters back at zero. The key
// loop as lower chooses it, and forced onto tensor cores (bf16; f32 keeps
// FFMA) and onto the FFMA loop's ring.
func TestAttentionDecodeRowsGPU(t *testing.T) {
	k, s := gpu(t)
	cases := []struct {
		name                    string
		nh, nkv, d, window, max int
		spl                     int
		perElement              bool
		stages, mma             int // lower.DecodeStages' and DecodeMMA's forcing
	}{
		{"g9-d128-full-auto", 18, 2, 128, 0, 600, 0, false, 0, 0},
		{"g6-d64-win64-per-element-auto", 12, 2, 64, 64, 4096, 0, true, 0, 0},
		{"g20-d32-full-split5", 40, 2, 32, 0, 400, 5, false, 0, 0},
		{"g6-d128-full-nosplit", 12, 2, 128, 0, 400, 1, false, 0, 0},
		{"g6-d128-full-split2-mma", 12, 2, 128, 0, 600, 2, false, 0, 2},
		{"g6-d128-full-split2-ring", 12, 2, 128, 0, 600, 2, false, 4, 1},
	}
	seq := []int32{2, 0, -1, 1, -1}
	hist := []int{0, 70, 300}
	R := len(seq)
	for ci, c := range cases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				es := int64(dt.Size())
				G := c.nh
				if c.perElement {
					G = c.nh * c.d
				}
				// One cache allocation for the 3 slots, stride elements apart;
				// a rig per slot keeps its reference and fills its history.
				base := NewKVLayer(0, 0, c.nkv, c.d, c.window, c.max)
				stride := int64(base.Slots * c.nkv * c.d)
				base.K, base.V = alloc(t, k, 3*stride*es), alloc(t, k, 3*stride*es)
				poison(t, s, base.K, 3*stride*es)
				poison(t, s, base.V, 3*stride*es)
				rigs := make([]*attnRig, len(hist))
				for sl, h := range hist {
					r := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, c.max, 64, uint64(300+10*ci+sl))
					r.c.K, r.c.V = base.K.Add(int64(sl)*stride*es), base.V.Add(int64(sl)*stride*es)
					r.fill(h)
					rigs[sl] = r
				}
				nsplit := c.spl
				if nsplit == 0 {
					nsplit = k.DecodeSplits(base)
				}
				q, kx, vx := alloc(t, k, int64(R*c.nh*c.d)*es), alloc(t, k, int64(R*c.nkv*c.d)*es), alloc(t, k, int64(R*c.nkv*c.d)*es)
				g, pos, dseq := alloc(t, k, int64(R*G)*es), alloc(t, k, int64(4*R)), uploadI32(t, k, s, seq)
				out, alone := alloc(t, k, int64(R*c.nh*c.d)*es), alloc(t, k, int64(R*c.nh*c.d)*es)
				ws := alloc(t, k, int64(R)*lower.DecodeWorkspace(nsplit, c.nh, c.d))
				counters := alloc(t, k, lower.DecodeCounters(R, c.nh, c.nkv))
				if err := s.Memset8(counters, 0, lower.DecodeCounters(R, c.nh, c.nkv)); err != nil {
					t.Fatal(err)
				}
				args := func(r, rows int, o cuda.DevicePtr) lower.AttentionDecodeArgs {
					at := func(p cuda.DevicePtr, n int) lower.Ptr { return ptr(p.Add(int64(r*n) * es)) }
					return lower.AttentionDecodeArgs{DType: dt.String(), Cache: base.cache(), Out: at(o, c.nh*c.d),
						Q: at(q, c.nh*c.d), K: at(kx, c.nkv*c.d), V: at(vx, c.nkv*c.d), Pos: ptr(pos.Add(int64(4 * r))),
						NH: c.nh, Scale: rigs[0].scale, Gate: lower.OutputGate{Gate: at(g, G), G: G},
						Workspace: ptr(ws), Counters: ptr(counters), Splits: nsplit, Stages: c.stages, MMA: c.mma, SMs: k.SMs(),
						Rows: rows, Seq: ptr(dseq.Add(int64(4 * r))), SeqStride: stride}
				}
				rng := rigs[0].r
				for step := 0; step < 2; step++ {
					qs := roundTo(dt, randF32(rng, R*c.nh*c.d, 1))
					ks := roundTo(dt, randF32(rng, R*c.nkv*c.d, 1))
					vs := roundTo(dt, randF32(rng, R*c.nkv*c.d, 1))
					gs := roundTo(dt, randF32(rng, R*G, 25))
					ps := make([]int32, R)
					want := make([]float32, R*c.nh*c.d)
					for r, sl := range seq {
						if sl < 0 {
							continue
						}
						a := rigs[sl]
						ps[r] = int32(a.next)
						w := want[r*c.nh*c.d : (r+1)*c.nh*c.d]
						if err := cpu.Attention(w, qs[r*c.nh*c.d:(r+1)*c.nh*c.d], ks[r*c.nkv*c.d:(r+1)*c.nkv*c.d], vs[r*c.nkv*c.d:(r+1)*c.nkv*c.d],
							ps[r:r+1], 1, c.nh, c.nkv, c.d, c.window, a.scale, a.ref); err != nil {
							t.Fatal(err)
						}
						if err := cpu.SoftplusGate(w, w, gs[r*G:(r+1)*G], 1, c.nh, c.d, G); err != nil {
							t.Fatal(err)
						}
						a.next++
					}
					for _, u := range []struct {
						p cuda.DevicePtr
						v []float32
					}{{q, qs}, {kx, ks}, {vx, vs}, {g, gs}} {
						rigs[0].uploadTo(u.p, u.v)
					}
					if err := cuda.Upload(s, pos, ps); err != nil {
						t.Fatal(err)
					}
					poison(t, s, out, int64(R*c.nh*c.d)*es)
					poison(t, s, alone, int64(R*c.nh*c.d)*es)
					if err := k.on(s).all(lower.AttentionDecode(args(0, R, out))); err != nil {
						t.Fatal(err)
					}
					// Each row again by itself: its key is written again, the same.
					for r := range seq {
						if err := k.on(s).all(lower.AttentionDecode(args(r, 1, alone))); err != nil {
							t.Fatal(err)
						}
					}
					got, one := download(t, s, dt, out, R*c.nh*c.d), download(t, s, dt, alone, R*c.nh*c.d)
					for r, sl := range seq {
						row := got[r*c.nh*c.d : (r+1)*c.nh*c.d]
						if sl < 0 {
							for i, v := range row {
								if v != 0 || math.Signbit(float64(v)) {
									t.Fatalf("step %d: padding row %d element %d is %v, want 0", step, r, i, v)
								}
							}
						} else {
							checkClose(t, fmt.Sprintf("step %d row %d (slot %d)", step, r, sl), row, want[r*c.nh*c.d:(r+1)*c.nh*c.d], attnTol(dt))
						}
						for i, v := range one[r*c.nh*c.d : (r+1)*c.nh*c.d] {
							if math.Float32bits(v) != math.Float32bits(row[i]) {
								t.Fatalf("step %d row %d (slot %d): element %d is %v alone, %v in the batch", step, r, sl, i, v, row[i])
							}
						}
					}
				}
			})
		}
	}
}

// TestAttentionDecodeReplayGPU: a CUDA graph of two gated decode launches
// (the same step into two outputs), replayed twice, gives both outputs the
// bits of an eager launch: at Laguna-S-2.1's sliding layer (16 splits)
// and full layer (33 splits on 132 SMs, most of them empty at this
// context), and unsplit.
func TestAttentionDecodeReplayGPU(t *testing.T) {
	k, s := gpu(t)
	for ci, c := range []struct {
		name                    string
		nh, nkv, d, window, max int
		hist, spl               int
	}{
		{"s21-sliding", 72, 8, 128, 512, 4096, 700, 0},
		{"s21-full", 48, 8, 128, 0, 4096, 100, 0},
		{"g4-d64-nosplit", 8, 2, 64, 0, 100, 50, 1},
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				a := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, c.max, 64, uint64(400+ci)).withGate(c.nh)
				a.fill(c.hist)
				q, kk, vv, pos := a.inputs(1)
				want := a.reference(q, kk, vv, pos, a.nh)
				n := a.nh * a.d
				qp, kp, vp := a.kvPtrs()
				outs := make([]cuda.DevicePtr, 3) // eager, then the graph's two
				for i := range outs {
					outs[i] = alloc(t, k, int64(n*dt.Size()))
					poison(t, s, outs[i], int64(n*dt.Size()))
				}
				step := func(out cuda.DevicePtr) error {
					return k.attentionDecode(s, dt, a.c, out, qp, kp, vp, a.pos, a.nh, a.scale, a.gateGPU(), a.ws, c.spl, 0, 0)
				}
				if err := step(outs[0]); err != nil {
					t.Fatal(err)
				}
				eager := download(t, s, dt, outs[0], n)
				checkClose(t, "eager", eager, want, attnTol(dt))
				g, err := s.Capture(func() error {
					if err := step(outs[1]); err != nil {
						return err
					}
					return step(outs[2])
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = g.Close() })
				ex, err := g.Instantiate()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ex.Close() })
				for replay := 0; replay < 2; replay++ {
					for _, o := range outs[1:] {
						poison(t, s, o, int64(n*dt.Size()))
					}
					if err := ex.Launch(s); err != nil {
						t.Fatal(err)
					}
					for i, o := range outs[1:] {
						got := download(t, s, dt, o, n)
						for j := range got {
							if math.Float32bits(got[j]) != math.Float32bits(eager[j]) {
								t.Fatalf("replay %d, launch %d: element %d is %v, eager %v", replay, i, j, got[j], eager[j])
							}
						}
					}
				}
			})
		}
	}
}
