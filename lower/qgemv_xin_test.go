package lower

import (
	"reflect"
	"testing"

	"lagc/quant"
)

// xinCase is a quantisation of x [T, K] (xt at arena+xoff) into
// workspace+xq and a qgemv of N outputs reading it, writing y at
// arena+yoff, and that qgemv quantising x itself.
type xinCase struct {
	T, K, N    int
	xt         string
	xoff, xq   int64
	yoff       int64
	swiglu     bool
	accumulate bool
}

func (c xinCase) args() QGEMVArgs {
	rows := c.N
	if c.swiglu {
		rows *= 2
	}
	return QGEMVArgs{T: c.T, K: c.K, N: c.N, XQ: Ptr{BaseWorkspace, c.xq}, W: Ptr{BaseWeights, 0}, Y: Ptr{BaseArena, c.yoff},
		WType: quant.Q8_0, WRows: rows, YType: "bf16", SwiGLU: c.swiglu, Accumulate: c.accumulate}
}

func (c xinCase) launches(t *testing.T) (q, g, f Launch) {
	t.Helper()
	x := Ptr{BaseArena, c.xoff}
	q, err := Q8XQuantize(c.xt, x, Ptr{BaseWorkspace, c.xq}, c.T, c.K)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = QGEMV(c.args()); err != nil {
		t.Fatal(err)
	}
	if f, err = QGEMVXIn(c.args(), x, c.xt); err != nil {
		f = Launch{Kernel: "none: " + err.Error()}
	}
	return q, g, f
}

// TestQGEMVXIn: the launch is qgemv's geometry and arguments with x in
// place of the quantised copy and the copy's bytes as shared memory, and
// it refuses what the in-block quantisation cannot take.
func TestQGEMVXIn(t *testing.T) {
	for _, c := range []xinCase{
		{T: 1, K: 1024, N: 3072, xt: "bf16", yoff: 1 << 20, accumulate: true},
		{T: 2, K: 1024, N: 64, xt: "f32", yoff: 1 << 20, swiglu: true},
		{T: 8, K: 256, N: 5, xt: "bf16", yoff: 1 << 20},
	} {
		_, g, f := c.launches(t)
		want := g
		want.Kernel, want.DTypes, want.Shmem = "qgemv_xin", []string{"bf16", c.xt}, c.T*c.K*3/2
		want.Args = append(append(append([]Arg(nil), g.Args[:5]...), ptrArg(Ptr{BaseArena, c.xoff})), g.Args[7:]...)
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%+v:\n got %s\nwant %s", c, f, want)
		}
	}
	ok := xinCase{T: 1, K: 1024, N: 64, xt: "bf16", yoff: 4096}
	for _, c := range []struct {
		name   string
		edit   func(a *QGEMVArgs)
		x      Ptr
		xt     string
		reason string
	}{
		{"over the limit", func(a *QGEMVArgs) { a.K = 4096 }, Ptr{BaseArena, 0}, "bf16", "T*K"},
		{"rows over the limit", func(a *QGEMVArgs) { a.T = 3 }, Ptr{BaseArena, 0}, "bf16", "T*K"},
		{"f16 x", func(a *QGEMVArgs) {}, Ptr{BaseArena, 0}, "f16", "dtype"},
		{"null x", func(a *QGEMVArgs) {}, Ptr{}, "bf16", "x"},
		{"y over x", func(a *QGEMVArgs) {}, Ptr{BaseArena, 4096 - 64}, "bf16", "overlap"},
		{"nine rows", func(a *QGEMVArgs) { a.T, a.K = 9, 32 }, Ptr{BaseArena, 0}, "bf16", "rows"},
		{"bad split", func(a *QGEMVArgs) { a.Split = 3 }, Ptr{BaseArena, 0}, "bf16", "split"},
		{"null y", func(a *QGEMVArgs) { a.Y = Ptr{} }, Ptr{BaseArena, 0}, "bf16", "y"},
	} {
		a := ok.args()
		c.edit(&a)
		if l, err := QGEMVXIn(a, c.x, c.xt); err == nil {
			t.Errorf("%s (%s): no error, got %s", c.name, c.reason, l)
		}
	}
	// Without XQ it still builds: the copy is the kernel's own.
	a := ok.args()
	a.XQ = Ptr{}
	if _, err := QGEMVXIn(a, Ptr{BaseArena, 0}, "bf16"); err != nil {
		t.Errorf("no XQ: %v", err)
	}
}

// TestParseQGEMV: what the fusion reads off a qgemv launch is what QGEMV
// was given (with the shape it chose).
func TestParseQGEMV(t *testing.T) {
	for _, c := range []xinCase{
		{T: 1, K: 1024, N: 3072, xt: "bf16", yoff: 1 << 20, accumulate: true},
		{T: 3, K: 3072, N: 100, xt: "bf16", xq: 256, yoff: 64, swiglu: true},
	} {
		_, g, _ := c.launches(t)
		a, ok := parseQGEMV(g)
		want := c.args()
		want.RowsPerWarp, want.Split = QGEMVShape(c.N, c.K, c.T, c.swiglu)
		if !ok || !reflect.DeepEqual(a, want) {
			t.Errorf("%+v: parsed %+v %v, want %+v", c, a, ok, want)
		}
	}
	_, g, _ := xinCase{T: 1, K: 1024, N: 64, xt: "bf16", yoff: 4096}.launches(t)
	g.Grid[0]++
	if _, ok := parseQGEMV(g); ok {
		t.Errorf("a qgemv QGEMV does not build is parsed: %s", g)
	}
}

// TestFuseQGEMVXIn: a quantisation is fused into the qgemv right after it
// exactly when that qgemv reads its copy, the activations are few enough,
// and nothing later reads the copy before it is rewritten.
func TestFuseQGEMVXIn(t *testing.T) {
	down := xinCase{T: 1, K: 1024, N: 3072, xt: "bf16", xoff: 0, yoff: 1 << 20, accumulate: true}
	q, g, f := down.launches(t)
	// the next layer's input quantised by its norm into workspace+0: a
	// copy of 3072 values covering q's
	norm := fusedTestLaunch(t, "bf16", 1, 3072, 1<<16)
	plainNorm := normTestLaunch(t, "bf16", 1, 3072, 1<<16)
	// another GEMV reading q's copy (as reuseQ8X leaves it)
	g2, err := QGEMV(QGEMVArgs{T: 1, K: 1024, N: 64, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 1 << 20}, Y: Ptr{BaseArena, 1 << 21},
		WType: quant.Q4_K, WRows: 64, YType: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	// a second quantise+GEMV pair rewriting the same copy from other x
	other := down
	other.xoff, other.yoff = 8192, 1<<21
	oq, og, of := other.launches(t)
	// a smaller copy at workspace+0: it does not cover q's scales
	small := xinCase{T: 1, K: 256, N: 64, xt: "bf16", xoff: 8192, yoff: 1 << 21}
	sq, sg, sf := small.launches(t)
	// the same GEMV with its copy past q's
	far := down
	far.xq = 4096
	fq, fg, ff := far.launches(t)
	addArena, err := Elementwise("add", "bf16", 3072, Ptr{BaseArena, 0}, Ptr{BaseArena, 1 << 20}, Ptr{BaseArena, 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	readsBelow := memcpy(Ptr{BaseArena, 0}, Ptr{BaseWorkspace, 0}, 16)
	readsPast := memcpy(Ptr{BaseArena, 0}, Ptr{BaseWorkspace, 4096 + 1536}, 16)
	big := xinCase{T: 1, K: 4096, N: 64, xt: "bf16", yoff: 1 << 20}
	bq, bg, _ := big.launches(t)
	rows3 := xinCase{T: 3, K: 1024, N: 64, xt: "bf16", yoff: 1 << 20}
	rq, rg, _ := rows3.launches(t)
	rows2 := xinCase{T: 2, K: 1024, N: 64, xt: "f32", yoff: 1 << 20, swiglu: true}
	r2q, r2g, r2f := rows2.launches(t)
	// y over x: the blocks would store y while others read x
	inPlace := xinCase{T: 1, K: 1024, N: 512, xt: "bf16", xoff: 0, yoff: 1024}
	iq, ig, _ := inPlace.launches(t)
	for _, c := range []struct {
		name      string
		steps     [][]Launch
		want      [][]Launch
		unchanged bool
	}{
		{name: "the shared expert's down", steps: [][]Launch{{q, g, addArena, norm}}, want: [][]Launch{{f, addArena, norm}}},
		{name: "across steps", steps: [][]Launch{{q}, {g}, {addArena}}, want: [][]Launch{nil, {f}, {addArena}}},
		{name: "at the stream's end", steps: [][]Launch{{q, g}}, want: [][]Launch{{f}}},
		{name: "a later GEMV reads the copy", steps: [][]Launch{{q, g, g2}}, unchanged: true},
		{name: "a later GEMV reads it after others", steps: [][]Launch{{q, g}, {addArena}, {g2}}, unchanged: true},
		{name: "a plain norm does not rewrite it", steps: [][]Launch{{q, g, plainNorm, g2}}, unchanged: true},
		{name: "a norm rewrites it first", steps: [][]Launch{{q, g, norm, g2}}, want: [][]Launch{{f, norm, g2}}},
		{name: "a quantisation rewrites it first, both fused", steps: [][]Launch{{q, g, oq, og}}, want: [][]Launch{{f, of}}},
		{name: "a smaller copy leaves the scales", steps: [][]Launch{{q, g, sq, sg, g2}}, unchanged: true},
		// the smaller quantisation's pointers count as reads of q's copy
		{name: "a smaller copy read by one GEMV", steps: [][]Launch{{q, g, sq, sg}}, want: [][]Launch{{q, g, sf}}},
		{name: "a pointer below the copy", steps: [][]Launch{{fq, fg, readsBelow}}, unchanged: true},
		{name: "a pointer past the copy", steps: [][]Launch{{fq, fg, readsPast}}, want: [][]Launch{{ff, readsPast}}},
		{name: "K over the limit", steps: [][]Launch{{bq, bg}}, unchanged: true},
		{name: "rows over the limit", steps: [][]Launch{{rq, rg}}, unchanged: true},
		{name: "two rows of f32, SwiGLU", steps: [][]Launch{{r2q, r2g}}, want: [][]Launch{{r2f}}},
		{name: "the GEMV reads another copy", steps: [][]Launch{{q, fg}}, unchanged: true},
		{name: "another length", steps: [][]Launch{{sq, g}}, unchanged: true},
		{name: "a launch between", steps: [][]Launch{{q, addArena, g}}, unchanged: true},
		{name: "y over x", steps: [][]Launch{{iq, ig}}, unchanged: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if c.unchanged {
				want = c.steps
			}
			got := make([][]Launch, len(c.steps))
			for i := range c.steps {
				got[i] = append([]Launch(nil), c.steps[i]...)
			}
			fuseQGEMVXIn(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%s\nwant\n%s", streamString(got), streamString(want))
			}
		})
	}
}

// TestDropQ8XSharedDown: in a MoE layer's decode stream the shared
// expert's down GEMV quantises its input itself after the other passes
// ran, and the routed experts' repeat of the shared expert's quantisation
// of the layer's input is still reused.
func TestDropQ8XSharedDown(t *testing.T) {
	const K, out = 256, 8192
	norm, fused := normTestLaunch(t, "bf16", 1, K, out), fusedTestLaunch(t, "bf16", 1, K, out)
	qx := q8xOfTestLaunch(t, "bf16", 1, K, out)
	gateUp, routed := qgemvTestLaunch(t, 1, K, 64, 16384), qgemvTestLaunch(t, 1, K, 32, 20480)
	down := xinCase{T: 1, K: 64, N: K, xt: "bf16", xoff: 16384, yoff: 20480, accumulate: true}
	q, g, f := down.launches(t)
	next := fusedTestLaunch(t, "bf16", 1, K, out)
	got := [][]Launch{{norm}, {qx, gateUp, qx, routed}, {q, g}, {next}}
	dropQ8X(got)
	if want := [][]Launch{{fused}, {gateUp, routed}, {f}, {next}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", streamString(got), streamString(want))
	}
}
