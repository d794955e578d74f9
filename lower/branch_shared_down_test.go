package lower

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"lagc/ir"
)

// TestBranchSharedDownPlan: with branchSharedDown (or
// branchSharedDownTail) enabled, S-2.1's q4_k_m decode schedule (three
// layers: two MoE ones) is the default one with each MoE layer's
// qgemv_xin_norm_pre taken apart: a fork and the side GEMV right after the
// launch before the routed gate+up (the side GEMV X's shape and inputs,
// its y an f32 buffer past the workspace), then join and qgemv_join_norm
// (X's y, norm and outputs) in X's place, or (tail) join before the routed
// down, which becomes moe_down_qgemv_pre_join with X's tail, and X gone;
// one buffer for both layers, the workspace grown by it; Plan.At gives the
// same launches; the prefill schedule and batched programs keep theirs.
func TestBranchSharedDownPlan(t *testing.T) {
	o := Options{DType: ir.BF16, Chunk: 64, MaxContext: 256, Seqs: 4}
	base, err := quantPlan(t, "laguna-s-2.1", 3, "q4_k_m", o)
	if err != nil {
		t.Fatal(err)
	}
	buf := Ptr{BaseWorkspace, base.Decode.Workspace}
	flat := func(s *Schedule) (ls []Launch) {
		for _, st := range s.Steps {
			ls = append(ls, st.Launches...)
		}
		return ls
	}
	for _, fusion := range []string{branchFusion, branchTailFusion, sharedBlocksFusion, sharedBlocksLastFusion} {
		t.Run(fusion, func(t *testing.T) {
			o.EnableFusions = []string{fusion}
			br, err := quantPlan(t, "laguna-s-2.1", 3, "q4_k_m", o)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := br.Decode.Workspace, base.Decode.Workspace+align(4*3072); got != want {
				t.Errorf("decode workspace %d, want %d (the default's and one f32 row of 3072)", got, want)
			}
			// Rebuild the branched stream from the default one.
			var want []Launch
			ls := flat(base.Decode)
			branches := 0
			for i := 0; i < len(ls); i++ {
				if i+3 < len(ls) && ls[i+1].Kernel == "moe_gateup_qgemv_trig" && ls[i+3].Kernel == "qgemv_xin_norm_pre" {
					d, x := ls[i+2], ls[i+3]
					side := Launch{Kernel: "qgemv_xin", File: "quant.cu", DTypes: []string{"f32", "bf16"}, Ints: x.Ints[:5], Grid: x.Grid,
						Block: x.Block, Shmem: x.Shmem, Stream: 1, Args: append(append([]Arg(nil), x.Args[:6]...), ptrArg(buf), i32(0))}
					switch fusion {
					case sharedBlocksFusion, sharedBlocksLastFusion:
						// 3072 rows, 4 warps of 8 rows a block (no K split): 96 blocks before d's (after, Last).
						args := append(append([]Arg(nil), d.Args...), i32(96))
						args = append(append(append(args, x.Args[:6]...), ptrArg(buf)), x.Args[8:]...)
						first := int64(b2i(fusion == sharedBlocksFusion))
						down := kernel("quant.cu", "moe_down_qgemv_pre_shared", []string{"bf16", "bf16", "bf16"},
							[]int64{d.Ints[0], d.Ints[1], d.Ints[2], d.Ints[3], 1, first, x.Ints[0], 8, 1, 3}, dims(d.Grid[0]+96), d.Block, d.Shmem, args...)
						want = append(want, ls[i], ls[i+1], down)
					case branchFusion:
						tail := kernel("quant.cu", "qgemv_join_norm", []string{"bf16", "bf16"}, []int64{3}, dims(1), dims(256), 0,
							append([]Arg{i32(3072), ptrArg(buf), x.Args[6]}, x.Args[9:]...)...)
						want = append(want, ls[i], Launch{Kernel: Fork}, side, ls[i+1], d, Launch{Kernel: Join}, tail)
					default:
						down := kernel("quant.cu", "moe_down_qgemv_pre_join", []string{"bf16", "bf16"}, []int64{d.Ints[0], d.Ints[1], d.Ints[2], d.Ints[3], 3},
							d.Grid, d.Block, d.Shmem, append(append(append([]Arg(nil), d.Args...), x.Args[8], ptrArg(buf)), x.Args[9:]...)...)
						want = append(want, ls[i], Launch{Kernel: Fork}, side, ls[i+1], Launch{Kernel: Join}, down)
					}
					i += 3
					branches++
					continue
				}
				want = append(want, ls[i])
			}
			if branches != 2 {
				t.Fatalf("%d MoE layers' launch runs in the default decode plan, want 2", branches)
			}
			if got := flat(br.Decode); !reflect.DeepEqual(got, want) {
				t.Fatalf("the branched decode plan is not the default's with its two branches:\n%s", firstLaunchDiff(got, want))
			}
			at, err := br.At(br.Decode, 1)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range br.Decode.Steps {
				if len(at[i])+len(st.Launches) > 0 && !reflect.DeepEqual(at[i], st.Launches) {
					t.Fatalf("Plan.At(decode, 1) step %s: %v, the plan's %v", st.Name, at[i], st.Launches)
				}
			}
			var out strings.Builder
			if err := br.Print(&out); err != nil {
				t.Fatal(err)
			}
			if n := len(flat(base.Decode)) + len(base.Decode.Finish); fusion == branchTailFusion && !strings.Contains(out.String(), fmt.Sprintf("%d launches (2 on a side stream, 2 branches)", n)) {
				t.Errorf("lagc plan's decode header does not count %d launches, 2 on a side stream, 2 branches:\n%.300s", n, out.String())
			}
			if n := len(flat(base.Decode)) + len(base.Decode.Finish) - 2; (fusion == sharedBlocksFusion || fusion == sharedBlocksLastFusion) && !strings.Contains(out.String(), fmt.Sprintf("decode T=1: %d steps, %d launches, ", len(base.Decode.Steps), n)) {
				t.Errorf("lagc plan's decode header does not count %d launches and no branch:\n%.300s", n, out.String())
			}
			if !reflect.DeepEqual(flat(br.Prefill), flat(base.Prefill)) {
				t.Errorf("the prefill schedule changed")
			}
			for _, B := range []int{2, 4} {
				a, err := br.AtBatch(B)
				if err != nil {
					t.Fatal(err)
				}
				b, err := base.AtBatch(B)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					t.Errorf("batch %d: the batched program changed", B)
				}
			}
		})
	}
}

// firstLaunchDiff names the first launch where got and want differ.
func firstLaunchDiff(got, want []Launch) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("launch %d:\n got  %s\n want %s", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d launches, want %d", len(got), len(want))
}

// TestBranchSharedDownRefuses: BranchSharedDown takes only the run it was
// made for, and refuses where the routed launches write what the side
// GEMV reads or writes.
func TestBranchSharedDownRefuses(t *testing.T) {
	p, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", Options{DType: ir.BF16, Chunk: 64, MaxContext: 256})
	if err != nil {
		t.Fatal(err)
	}
	var g, d, x Launch
	for _, st := range p.Decode.Steps {
		for _, l := range st.Launches {
			switch l.Kernel {
			case "moe_gateup_qgemv_trig":
				g = l
			case "moe_down_qgemv_pre":
				d = l
			case "qgemv_xin_norm_pre":
				x = l
			}
		}
	}
	buf := Ptr{BaseWorkspace, p.Decode.Workspace}
	if _, _, _, _, err := BranchSharedDown(g, d, x, buf); err != nil {
		t.Fatalf("the plan's own run: %v", err)
	}
	if _, _, _, _, err := BranchSharedDownTail(g, d, x, buf); err != nil {
		t.Fatalf("the plan's own run, tail: %v", err)
	}
	with := func(l Launch, f func(*Launch)) Launch {
		l.Args, l.Ints = append([]Arg(nil), l.Args...), append([]int64(nil), l.Ints...)
		f(&l)
		return l
	}
	xin := x.Args[5].Ptr()
	for name, c := range map[string]struct {
		g, d, x Launch
		buf     Ptr
	}{
		"not a gate+up":         {d, d, x, buf},
		"not a down":            {g, g, x, buf},
		"not the shared down":   {g, d, d, buf},
		"two rows":              {g, d, with(x, func(l *Launch) { l.Ints[1] = 2 }), buf},
		"not accumulating":      {g, d, with(x, func(l *Launch) { l.Args[7] = i32(0) }), buf},
		"no buffer":             {g, d, x, Ptr{}},
		"down writes xin":       {g, with(d, func(l *Launch) { l.Args[11] = ptrArg(xin) }), x, buf},
		"gate+up writes xin":    {with(g, func(l *Launch) { l.Args[13] = ptrArg(xin) }), d, x, buf},
		"down writes the sums":  {g, with(d, func(l *Launch) { l.Args[11] = ptrArg(buf) }), x, buf},
		"scales write the sums": {with(g, func(l *Launch) { l.Args[14] = ptrArg(buf) }), d, x, buf},
	} {
		if _, _, _, _, err := BranchSharedDown(c.g, c.d, c.x, c.buf); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, _, _, _, err := BranchSharedDownTail(c.g, c.d, c.x, c.buf); err == nil {
			t.Errorf("%s, tail: no error", name)
		}
		if _, err := SharedDownBlocks(c.g, c.d, c.x, c.buf, false); err == nil {
			t.Errorf("%s, shared blocks: no error", name)
		}
	}
	// The tail's own conditions: one token, d writing x's y, the register path.
	for name, dd := range map[string]Launch{
		"two tokens":        with(d, func(l *Launch) { l.Grid[0] *= 2 }),
		"another y":         with(d, func(l *Launch) { l.Args[11] = ptrArg(Ptr{BaseArena, 1 << 20}) }),
		"down accumulating": with(d, func(l *Launch) { l.Args[12] = i32(1) }),
		"all units at once": with(d, func(l *Launch) { l.Ints[4] = 1 }),
	} {
		if _, _, _, _, err := BranchSharedDownTail(g, dd, x, buf); err == nil {
			t.Errorf("tail, %s: no error", name)
		}
		if _, err := SharedDownBlocks(g, dd, x, buf, true); err == nil {
			t.Errorf("shared blocks, %s: no error", name)
		}
	}
	// The shared blocks run x's K split in d's warps.
	if _, err := SharedDownBlocks(g, d, x, buf, false); err != nil {
		t.Fatalf("the plan's own run, shared blocks: %v", err)
	}
	if _, err := SharedDownBlocks(g, d, with(x, func(l *Launch) { l.Ints[4] = 8 }), buf, false); err == nil || !strings.Contains(err.Error(), "K split 8") {
		t.Errorf("shared blocks, a K split of 8 in 4 warps: %v, want an error naming the split", err)
	}
}
