package lower

import "testing"

// TestDecodeKeyLoopChoice: which key loop AttentionDecode gives the decode
// attention, by cache and forcing: tensor cores for Laguna-S-2.1's full
// layers where a split can hold DecodeMMAMinKeys (from 3168 slots over 33
// splits; the kernel then runs them where it does), the FFMA loop
// with a ring where those cannot run and blocks walk 4 tiles or more, the
// plain loop at one tile a block (a 512-key sliding ring, 512 slots), and
// forced choices (a ring shortened to fit, none where chunks do not fit
// the block; lower's own ring no deeper than two blocks an SM allow).
func TestDecodeKeyLoopChoice(t *testing.T) {
	p := Ptr{BaseArena, 0}
	for _, c := range []struct {
		name                                  string
		dt                                    string
		nh, d, window, slots, splits, st, mma int
		wantST, wantTC                        int64
	}{
		{"s21-full-32768", "bf16", 48, 128, 0, 32768, 0, 0, 0, 0, 1},
		{"s21-full-4096", "bf16", 48, 128, 0, 4096, 0, 0, 0, 0, 1},
		{"s21-full-3168", "bf16", 48, 128, 0, 3168, 0, 0, 0, 0, 1}, // 96 keys a split
		{"s21-full-3135", "bf16", 48, 128, 0, 3135, 0, 0, 0, 0, 0}, // 95
		{"s21-full-2048", "bf16", 48, 128, 0, 2048, 0, 0, 0, 0, 0},
		{"s21-full-512", "bf16", 48, 128, 0, 512, 0, 0, 0, 0, 0},
		{"s21-sliding-512", "bf16", 72, 128, 512, 512, 0, 0, 0, 0, 0},
		{"s21-sliding-forced", "bf16", 72, 128, 512, 512, 0, 0, 2, 0, 0},        // a group of 9: no tensor cores
		{"s21-sliding-ring-forced", "bf16", 72, 128, 512, 512, 0, 3, 0, 3, 0},   // a ring of 3 on a wrapped window
		{"s21-full-mma-off", "bf16", 48, 128, 0, 32768, 0, 0, 1, 4, 0},          // the ring instead
		{"s21-full-mma-off-ring-off", "bf16", 48, 128, 0, 32768, 0, 1, 1, 0, 0}, // neither
		{"f32-full-32768", "f32", 48, 128, 0, 32768, 0, 0, 0, 3, 0},             // 4 stages of 33 KiB would leave one block an SM
		{"f32-full-32768-forced4", "f32", 48, 128, 0, 32768, 0, 4, 0, 4, 0},
		{"f32-d256-auto", "f32", 16, 256, 0, 8192, 1, 0, 0, 0, 0}, // one stage of 66 KiB fits two blocks: no ring
		{"bf16-d256-auto", "bf16", 16, 256, 0, 8192, 1, 0, 0, 3, 0},
		{"f32-d256-ring8", "f32", 16, 256, 0, 8192, 1, 8, 0, 3, 0}, // 8 stages of 66 KiB do not fit: 3
		{"bf16-d40-ring", "bf16", 16, 40, 0, 8192, 1, 4, 0, 0, 0},  // 5 chunks a row, 64 threads
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := Cache{K: Ptr{BaseKV, 0}, V: Ptr{BaseKV, 1 << 30}, NKV: 8, HeadDim: c.d, Window: c.window, Slots: c.slots}
			ls, err := AttentionDecode(AttentionDecodeArgs{DType: c.dt, Cache: cache, Out: p, Q: p, Pos: p, NH: c.nh, Scale: 1,
				Workspace: p, Counters: p, Splits: c.splits, Stages: c.st, MMA: c.mma, SMs: 132})
			if err != nil {
				t.Fatal(err)
			}
			l := ls[0]
			if l.Ints[2] != c.wantST || l.Ints[3] != c.wantTC {
				t.Fatalf("stages %d, tensor cores %d; want %d, %d", l.Ints[2], l.Ints[3], c.wantST, c.wantTC)
			}
			if l.Shmem > decodeShmemMax {
				t.Fatalf("%d bytes of shared memory", l.Shmem)
			}
		})
	}
	for _, bad := range []AttentionDecodeArgs{{Stages: -1}, {Stages: MaxDecodeStages + 1}, {MMA: 3}} {
		bad.DType, bad.Cache, bad.Out, bad.Q, bad.Pos, bad.NH, bad.Workspace, bad.Counters = "bf16",
			Cache{K: Ptr{BaseKV, 0}, V: Ptr{BaseKV, 1 << 20}, NKV: 8, HeadDim: 128, Slots: 4096}, p, p, p, 48, p, p
		if _, err := AttentionDecode(bad); err == nil {
			t.Errorf("stages %d, tensor cores %d: no error", bad.Stages, bad.MMA)
		}
	}
}
