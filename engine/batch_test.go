package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lagc/internal/fixture"
)

// TestBatchStepEqualsAlone feeds several sequences through batched steps
// in a random schedule (prefill chunks of any size beside decode rows,
// sequences starting and ending at different steps, windows crossed) and
// checks every row's logits against the sequence run alone, bit for bit.
func TestBatchStepEqualsAlone(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			const slots = 4
			m, err := Open(dir, Options{Slots: slots})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			b, err := m.Batch()
			if err != nil {
				t.Fatal(err)
			}
			V := m.Config.VocabSize
			rng := rand.New(rand.NewPCG(7, 9))
			seqs := make([][]int32, 7)
			alone := make([][]float32, len(seqs))
			for i := range seqs {
				seqs[i] = make([]int32, 10+rng.IntN(m.Config.MaxPositionEmbeddings-10))
				for j := range seqs[i] {
					seqs[i][j] = int32(rng.IntN(V))
				}
				m.Backend.Reset()
				logits, _, err := m.Backend.Forward(seqs[i])
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = append([]float32(nil), logits...)
			}
			got := make([][]float32, len(seqs))
			fed := make([]int, len(seqs))
			slotOf := map[int]int{} // sequence -> slot while it runs
			nextSeq := 0
			for steps := 0; ; steps++ {
				// Start sequences in free slots.
				for s := 0; s < slots && nextSeq < len(seqs); s++ {
					busy := false
					for _, sl := range slotOf {
						busy = busy || sl == s
					}
					if !busy {
						b.ResetSlot(s)
						slotOf[nextSeq] = s
						nextSeq++
					}
				}
				if len(slotOf) == 0 {
					break
				}
				var segs []Segment
				var order []int
				for i := range seqs {
					sl, ok := slotOf[i]
					if !ok || rng.IntN(4) == 0 { // sometimes a sequence sits a step out
						continue
					}
					n := 1 + rng.IntN(min(9, len(seqs[i])-fed[i]))
					segs = append(segs, Segment{Slot: sl, Tokens: seqs[i][fed[i] : fed[i]+n]})
					order = append(order, i)
				}
				if len(segs) == 0 {
					continue
				}
				rng.Shuffle(len(segs), func(a, c int) { segs[a], segs[c] = segs[c], segs[a]; order[a], order[c] = order[c], order[a] })
				logits, next, err := b.Step(segs)
				if err != nil {
					t.Fatalf("step %d: %v", steps, err)
				}
				rows := 0
				for _, sg := range segs {
					rows += len(sg.Tokens)
				}
				if len(logits) != rows*V || len(next) != rows {
					t.Fatalf("step %d: %d logits, %d ids for %d rows", steps, len(logits), len(next), rows)
				}
				r := 0
				for k, i := range order {
					n := len(segs[k].Tokens)
					got[i] = append(got[i], logits[r*V:(r+n)*V]...)
					fed[i] += n
					r += n
					if fed[i] == len(seqs[i]) {
						delete(slotOf, i)
					}
				}
			}
			for i := range seqs {
				if err := sameBits(got[i], alone[i]); err != nil {
					t.Errorf("sequence %d (%d tokens): %v", i, len(seqs[i]), err)
				}
			}
		})
	}
}

// TestBatchStepLast: the CPU batcher's StepLast returns, step after step,
// each segment's last row of Step's logits bit for bit and Step's argmax,
// for steps of decode rows beside prompt chunks: two models fed the same
// steps, one through Step and one through StepLast.
func TestBatchStepLast(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			const slots = 3
			var bs [2]Batcher
			V := 0
			for i := range bs {
				m, err := Open(dir, Options{Slots: slots})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if bs[i], err = m.Batch(); err != nil {
					t.Fatal(err)
				}
				V = m.Config.VocabSize
			}
			lb, ok := bs[1].(LastRowBatcher)
			if !ok {
				t.Fatal("the CPU batcher is not a LastRowBatcher")
			}
			rng := rand.New(rand.NewPCG(2, 8))
			for step := range 8 {
				var segs []Segment
				for s := range slots {
					n := 1 // a decode row
					if step == 0 || rng.IntN(3) == 0 {
						n = 2 + rng.IntN(12) // a prompt chunk
					}
					tok := make([]int32, n)
					for j := range tok {
						tok[j] = int32(rng.IntN(V))
					}
					segs = append(segs, Segment{Slot: s, Tokens: tok})
				}
				rng.Shuffle(len(segs), func(a, c int) { segs[a], segs[c] = segs[c], segs[a] })
				logits, next, err := bs[0].Step(segs)
				if err != nil {
					t.Fatal(err)
				}
				last, lnext, err := lb.StepLast(segs)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(lnext, next) || len(last) != len(segs)*V {
					t.Fatalf("step %d: argmax %v and %d logits; Step's %v and %d rows of %d", step, lnext, len(last), next, len(segs), V)
				}
				row := 0
				for i, sg := range segs {
					row += len(sg.Tokens)
					if err := sameBits(last[i*V:(i+1)*V], logits[(row-1)*V:row*V]); err != nil {
						t.Fatalf("step %d, segment %d (%d tokens): %v", step, i, len(sg.Tokens), err)
					}
				}
			}
		})
	}
}

// TestBatchRewind: a slot rewound to a prefix it holds continues exactly as
// a fresh sequence would; where a sliding window forbids it, Rewind fails
// and leaves the slot as it was.
func TestBatchRewind(t *testing.T) {
	dir := fixtureDirs(t)[0]
	m, err := Open(dir, Options{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, _ := m.Batch()
	W := m.Config.SlidingWindow
	seq := make([]int32, 3*W)
	for i := range seq {
		seq[i] = int32(i * 7 % m.Config.VocabSize)
	}
	b.ResetSlot(1)
	full, _, err := b.Step([]Segment{{Slot: 1, Tokens: seq}})
	if err != nil {
		t.Fatal(err)
	}
	full = append([]float32(nil), full...)
	V := m.Config.VocabSize
	for _, tc := range []struct {
		held, to int
		ok       bool
	}{{W - 1, 2, true}, {3*W - 1, 3*W - 2, true}, {3 * W, 3*W - 1, true}, {3 * W, W, false}} {
		name := fmt.Sprintf("holding %d, back to %d", tc.held, tc.to)
		b.ResetSlot(1)
		if _, _, err := b.Step([]Segment{{Slot: 1, Tokens: seq[:tc.held]}}); err != nil {
			t.Fatal(err)
		}
		err := b.Rewind(1, tc.to)
		if (err == nil) != tc.ok {
			t.Fatalf("%s: error %v, want ok=%v", name, err, tc.ok)
		}
		if !tc.ok {
			if b.SlotLen(1) != tc.held {
				t.Fatalf("%s: a refused rewind left %d positions", name, b.SlotLen(1))
			}
			continue
		}
		logits, _, err := b.Step([]Segment{{Slot: 1, Tokens: seq[tc.to:]}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := sameBits(logits, full[tc.to*V:]); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestBatchStepErrors(t *testing.T) {
	m, err := Open(fixtureDirs(t)[0], Options{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, _ := m.Batch()
	max := m.Config.MaxPositionEmbeddings
	for _, tc := range []struct {
		name string
		segs []Segment
		want string
	}{
		{"no segments", nil, "no segments"},
		{"slot out of range", []Segment{{Slot: 2, Tokens: []int32{1}}}, "slot 2 is outside [0, 2)"},
		{"slot twice", []Segment{{Slot: 1, Tokens: []int32{1}}, {Slot: 1, Tokens: []int32{2}}}, "appear twice"},
		{"empty segment", []Segment{{Slot: 0, Tokens: nil}}, "has no tokens"},
		{"past the context", []Segment{{Slot: 0, Tokens: make([]int32, max+1)}}, "exceed the context length"},
	} {
		_, _, err := b.Step(tc.segs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	if _, err := Open(fixtureDirs(t)[0], Options{Slots: -1}); err == nil {
		t.Error("negative slots accepted")
	}
}

func sameBits(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("value %d is %v, alone %v", i, got[i], want[i])
		}
	}
	return nil
}

// BenchmarkBatchDecode: aggregate decode speed of the bundled model on the
// CPU with B sequences per step, each 64 positions in.
func BenchmarkBatchDecode(b *testing.B) {
	for _, B := range []int{1, 4, 8, 16} {
		b.Run(fmt.Sprintf("batch%d", B), func(b *testing.B) {
			m, err := Open(filepath.Join(fixture.Root(b), "models", "tiny"), Options{Slots: B, MaxContext: 1 << 16})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			bt, _ := m.Batch()
			prompt := make([]int32, 64)
			for i := range prompt {
				prompt[i] = int32(100 + i)
			}
			segs := make([]Segment, B)
			for s := range segs {
				bt.ResetSlot(s)
				if _, _, err := bt.Step([]Segment{{Slot: s, Tokens: prompt}}); err != nil {
					b.Fatal(err)
				}
				segs[s] = Segment{Slot: s, Tokens: []int32{7}}
			}
			b.ResetTimer()
			for b.Loop() {
				if _, _, err := bt.Step(segs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
