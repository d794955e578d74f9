package lower

import (
	"reflect"
	"testing"

	"lagc/quant"
)

// unfuseRouterQGEMVs splits every router_qgemv launch of steps back into
// its router and GEMV, the GEMV where like, the stream before the fusion,
// has it (unfusePairs), and counts them.
func unfuseRouterQGEMVs(steps, like [][]Launch) ([][]Launch, int) {
	return unfusePairs(steps, like, SplitRouterQGEMV)
}

// routerAndGEMV is S-2.1's decode router (fused) and its shared expert's
// gate+up GEMV: 1024 SwiGLU rows of 3072, Q8_0, reading the quantised x at
// the workspace's start.
func routerAndGEMV(t *testing.T) (f, q Launch) {
	t.Helper()
	g, r := routerPair(t, 1, 256, 3072, 10)
	f, err := RouterFused(g, r, Ptr{BaseSync, 0})
	if err != nil {
		t.Fatal(err)
	}
	q, err = QGEMV(QGEMVArgs{T: 1, K: 3072, N: 1024, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 2 << 30}, Y: Ptr{BaseArena, 4 << 20},
		WType: quant.Q8_0, WRows: 2048, YType: "bf16", SwiGLU: true})
	if err != nil {
		t.Fatal(err)
	}
	return f, q
}

// TestRouterQGEMV: the fused launch is the router's blocks then the GEMV's,
// with both launches' instantiations and arguments, and splits back into
// the two; it refuses a GEMV that reads or writes what the router writes,
// one that writes what the router reads, and launches of other kinds.
func TestRouterQGEMV(t *testing.T) {
	f, q := routerAndGEMV(t)
	l, err := RouterQGEMV(f, q)
	if err != nil {
		t.Fatal(err)
	}
	if l.Kernel != "router_qgemv" || l.Grid != dims(f.Grid[0]+q.Grid[0]) || l.Block != dims(256) || l.Shmem != f.Shmem ||
		!reflect.DeepEqual(l.DTypes, []string{"bf16", "bf16", "bf16"}) || len(l.Ints) != 7 || l.Args[0] != i32(f.Grid[0]) {
		t.Fatalf("fused: %s", l)
	}
	if f2, q2, ok := SplitRouterQGEMV(l); !ok || !reflect.DeepEqual(f2, f) || !reflect.DeepEqual(q2, q) {
		t.Fatalf("split back:\n%s\n%s\nwant\n%s\n%s", f2, q2, f, q)
	}
	mod := func(l Launch, fn func(*Launch)) Launch {
		l.Args = append([]Arg(nil), l.Args...)
		fn(&l)
		return l
	}
	logits, x := f.Args[5].Ptr(), f.Args[3].Ptr()
	for name, c := range map[string]struct{ f, q Launch }{
		"GEMV reads the logits":      {f, mod(q, func(l *Launch) { l.Args[5], l.Args[6] = ptrArg(logits), ptrArg(q8xScales(logits, 1, 3072)) })},
		"GEMV writes over the ids":   {f, mod(q, func(l *Launch) { l.Args[7] = f.Args[11] })},
		"GEMV writes over x":         {f, mod(q, func(l *Launch) { l.Args[7] = ptrArg(x) })},
		"GEMV accumulates on logits": {f, mod(q, func(l *Launch) { l.Args[7], l.Args[8] = ptrArg(logits), i32(1) })},
		"not as QGEMV builds it":     {f, mod(q, func(l *Launch) { l.Grid[0]++ })},
		"the launches swapped":       {q, f},
		"a plain GEMV":               {f, mod(f, func(l *Launch) { l.Kernel = "gemv" })},
	} {
		if l, err := RouterQGEMV(c.f, c.q); err == nil {
			t.Errorf("%s: fused: %s", name, l)
		}
	}
}

// TestFuseRouterQGEMV: a fused router and the GEMV right after it, across
// steps too, become one launch at the router's place; a launch between
// them, or the GEMV first, leaves them.
func TestFuseRouterQGEMV(t *testing.T) {
	f, q := routerAndGEMV(t)
	l, err := RouterQGEMV(f, q)
	if err != nil {
		t.Fatal(err)
	}
	other := memcpy(Ptr{BaseArena, 8 << 20}, Ptr{BaseArena, 9 << 20}, 64)
	for _, c := range []struct {
		name        string
		steps, want [][]Launch
	}{
		{"in one step", [][]Launch{{other, f, q, other}}, [][]Launch{{other, l, other}}},
		{"across steps", [][]Launch{{f}, {q}}, [][]Launch{{l}, {}}},
		{"a launch between", [][]Launch{{f, other, q}}, nil},
		{"the GEMV first", [][]Launch{{q, f}}, nil},
	} {
		got := make([][]Launch, len(c.steps))
		for i := range c.steps {
			got[i] = append([]Launch(nil), c.steps[i]...)
		}
		fuseRouterQGEMV(got)
		want := c.want
		if want == nil {
			want = c.steps
		}
		if !reflect.DeepEqual(got, want) && !emptyEqual(got, want) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, streamString(got), streamString(want))
		}
		// Split back, the stream is the one before (a step's launches may
		// move to the step before).
		flat := func(steps [][]Launch) (out []Launch) {
			for _, ls := range steps {
				out = append(out, ls...)
			}
			return out
		}
		if back, n := unfuseRouterQGEMVs(got, c.steps); (n == 1) != (c.want != nil) || !reflect.DeepEqual(flat(back), flat(c.steps)) {
			t.Errorf("%s: %d split back: %s", c.name, n, streamString(back))
		}
	}
}

// TestRouterQGEMVShapes: RouterQGEMV takes the shapes TestRouterQGEMVGPU
// runs (checked here, without a GPU).
func TestRouterQGEMVShapes(t *testing.T) {
	for _, c := range []struct {
		E, K, k int
		qt      quant.Type
		N       int
		swiglu  bool
		acc     bool
	}{
		{256, 3072, 10, quant.Q8_0, 1024, true, false},
		{64, 512, 8, quant.Q4_K, 200, true, true},
		{37, 256, 5, quant.Q6_K, 37, false, false},
		{300, 1024, 12, quant.IQ4_XS, 1, true, false},
	} {
		for _, dt := range []string{"f32", "bf16"} {
			g, err := MatMul(MatMulArgs{T: 1, K: c.K, N: c.E, X: Ptr{BaseArena, 0}, W: Ptr{BaseWeights, 0}, Y: Ptr{BaseArena, 1 << 20},
				XType: dt, WType: dt, YType: "f32", SMs: 132})
			if err != nil {
				t.Fatal(err)
			}
			r, err := RouterTopK("f32", Ptr{BaseArena, 2 << 20}, Ptr{BaseArena, 3 << 20}, Ptr{BaseArena, 1 << 20}, Ptr{BaseArena, 5 << 20}, 1, c.E, c.k, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			f, err := RouterFused(g, r, Ptr{BaseSync, 0})
			if err != nil {
				t.Fatalf("%+v %s: %v", c, dt, err)
			}
			rows := c.N
			if c.swiglu {
				rows *= 2
			}
			q, err := QGEMV(QGEMVArgs{T: 1, K: c.K, N: c.N, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 1 << 30}, Y: Ptr{BaseArena, 4 << 20},
				WType: c.qt, WRows: rows, YType: dt, SwiGLU: c.swiglu, Accumulate: c.acc})
			if err != nil {
				t.Fatalf("%+v %s: %v", c, dt, err)
			}
			if _, err := RouterQGEMV(f, q); err != nil {
				t.Errorf("%+v %s: %v", c, dt, err)
			}
		}
	}
}
