package lower

import (
	"testing"

	"lagc/quant"
)

// unfuseGEMVNorms is steps with every GEMV fused with a norm
// (QGEMVNorm) split again: the GEMV in its place, the norm right after
// it, at the start of the next step where the GEMV ends its own (the
// norm's step in the plans). It also returns how many it split.
func unfuseGEMVNorms(steps [][]Launch) ([][]Launch, int) {
	return unfusePairs(steps, nil, SplitQGEMVNorm)
}

// TestFuseGEMVNorm: a one-row qgemv or qgemv_xin and the norm of its y
// right after it (plain, _q8x, add_ with y as a or b, warp or block)
// become one launch at the GEMV's place, across steps too, and split back
// into the two; and nothing changes with more rows, when the norm reads
// something else or only part of y, its weight lies over y, its other
// operand overlaps y, or a launch sits between them.
func TestFuseGEMVNorm(t *testing.T) {
	const H = 3072
	arena := func(off int64) Ptr { return Ptr{BaseArena, off} }
	wn, xq := Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}
	must := mustLaunch(t)
	y, out, res, sum := arena(0), arena(1<<20), arena(2<<20), arena(3<<20)
	gemv := func(T, N int, yt string, y Ptr) Launch {
		return must(QGEMV(QGEMVArgs{T: T, K: 9216, N: N, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 1 << 20}, Y: y,
			WType: quant.Q8_0, WRows: N, YType: yt, Accumulate: true}))
	}
	g := gemv(1, H, "bf16", y)
	gx := must(QGEMVXIn(QGEMVArgs{T: 1, K: 1024, N: H, W: Ptr{BaseWeights, 1 << 20}, Y: y, WType: quant.Q8_0, WRows: H,
		YType: "bf16", Accumulate: true}, arena(5<<20), "bf16"))
	gf := gemv(1, 1000, "f32", y)
	norm := must(RMSNorm("bf16", "bf16", out, y, wn, 1, H, 1e-6))
	normQ := must(RMSNormQ8X("bf16", "bf16", out, y, wn, xq, 1, H, 1e-6))
	addQ := must(AddRMSNormQ8X("bf16", "bf16", sum, out, res, y, wn, xq, 1, H, 1e-6))
	addA := must(AddRMSNorm("bf16", "bf16", y, out, y, res, wn, 1, H, 1e-6)) // y is a and the sum
	warp := must(RMSNorm("f32", "bf16", out, y, wn, 1, 1000, 1e-6))
	other := must(Elementwise("silu", "bf16", H, out, arena(8<<20)))
	fuse := func(g, n Launch) Launch { return must(QGEMVNorm(g, n, Ptr{BaseSync, 0})) }
	for _, c := range []struct {
		name        string
		steps, want [][]Launch
	}{
		{"norm", [][]Launch{{g, norm}}, [][]Launch{{fuse(g, norm)}}},
		{"q8x next step", [][]Launch{{other, g}, {normQ, other}}, [][]Launch{{other, fuse(g, normQ)}, {other}}},
		{"past empty steps", [][]Launch{{g}, {}, nil, {normQ}}, [][]Launch{{fuse(g, normQ)}, {}, nil, nil}},
		{"xin add q8x", [][]Launch{{gx}, {addQ}}, [][]Launch{{fuse(gx, addQ)}, nil}},
		{"add y is a", [][]Launch{{g}, {addA}}, [][]Launch{{fuse(g, addA)}, nil}},
		{"warp f32", [][]Launch{{gf, warp}}, [][]Launch{{fuse(gf, warp)}}},
		{"two", [][]Launch{{g, norm}, {gx, addQ}}, [][]Launch{{fuse(g, norm)}, {fuse(gx, addQ)}}},
		{"two rows", [][]Launch{{gemv(2, H, "bf16", y), must(RMSNorm("bf16", "bf16", out, y, wn, 2, H, 1e-6))}}, nil},
		{"norm of 2 rows of half", [][]Launch{{g, must(RMSNorm("bf16", "bf16", out, y, wn, 2, H/2, 1e-6))}}, nil},
		{"reads something else", [][]Launch{{g, must(RMSNorm("bf16", "bf16", out, res, wn, 1, H, 1e-6))}}, nil},
		{"reads part of y", [][]Launch{{g, must(RMSNorm("bf16", "bf16", out, y.At(64), wn, 1, H-32, 1e-6))}}, nil},
		{"dtype differs", [][]Launch{{g, must(RMSNorm("f32", "bf16", out, y, wn, 1, H, 1e-6))}}, nil},
		{"weight over y", [][]Launch{{g, must(RMSNorm("bf16", "bf16", out, y, y.At(2*H-8), 1, H, 1e-6))}}, nil},
		{"add's other over y", [][]Launch{{g, must(AddRMSNorm("bf16", "bf16", sum, out, y.At(64), y, wn, 1, H, 1e-6))}}, nil},
		{"a launch between", [][]Launch{{g, other, norm}}, nil},
		{"a launch between steps", [][]Launch{{g}, {other}, {norm}}, nil},
		{"the norm first", [][]Launch{{norm, g}}, nil},
		{"not a GEMV", [][]Launch{{must(Elementwise("mul", "bf16", H, res, sum, y)), norm}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := runFusions(t, c.steps, c.want, fuseAddNorm, fuseGEMVNorm)
			back, n := unfuseGEMVNorms(got)
			if c.want == nil {
				if n != 0 {
					t.Errorf("split %d", n)
				}
				return
			}
			if n == 0 || !launchStreamsEqual(flatten(back), flatten(c.steps)) {
				t.Errorf("split again:\n%s\nwant\n%s", streamString(back), streamString(c.steps))
			}
		})
	}
}

// TestQGEMVNormArgs: the fused launch is the GEMV's geometry and
// arguments, then the norm's; the builder refuses a null counter and a
// GEMV or norm it does not recognise.
func TestQGEMVNormArgs(t *testing.T) {
	const H = 3072
	y, out := Ptr{BaseArena, 0}, Ptr{BaseArena, 1 << 20}
	g, err := QGEMV(QGEMVArgs{T: 1, K: 9216, N: H, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 1 << 20}, Y: y,
		WType: quant.Q8_0, WRows: H, YType: "bf16", Accumulate: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := RMSNormQ8X("bf16", "f32", out, y, Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}, 1, H, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	f, err := QGEMVNorm(g, n, Ptr{BaseSync, 0})
	if err != nil {
		t.Fatal(err)
	}
	want := "qgemv_norm<bf16_t, float, 8, 1, 0, 4, 4, 1> grid 384,1,1 block 256,1,1 shmem 0 (i32 3072, i32 9216, i64 3072, i64 0, " +
		"weights+1048576, workspace+0, workspace+9216, arena+0, i32 1, sync+0, i32 3072, i32 384, f32 1e-06, arena+0, null, null, null, " +
		"weights+0, arena+1048576, workspace+0, workspace+3072)"
	if f.String() != want {
		t.Errorf("got  %s\nwant %s", f, want)
	}
	if _, err := QGEMVNorm(g, n, Ptr{}); err == nil {
		t.Error("null counter: no error")
	}
	if _, err := QGEMVNorm(n, g, Ptr{BaseSync, 0}); err == nil {
		t.Error("swapped: no error")
	}
	bad := g
	bad.Grid[0]++
	if _, err := QGEMVNorm(bad, n, Ptr{BaseSync, 0}); err == nil {
		t.Error("a GEMV of another geometry: no error")
	}
	if _, _, ok := SplitQGEMVNorm(g); ok {
		t.Error("split a plain GEMV")
	}
}
