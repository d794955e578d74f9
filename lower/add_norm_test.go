package lower

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// unfuseAddNorm splits a fused add and norm (AddRMSNorm, AddRMSNormQ8X)
// into the add and the norm it stands for.
func unfuseAddNorm(l Launch) (add, norm Launch, ok bool) {
	if !strings.HasPrefix(l.Kernel, "add_rms_norm_") || (len(l.Args) != 8 && len(l.Args) != 10) || len(l.DTypes) != 2 {
		return Launch{}, Launch{}, false
	}
	a := l.Args
	rows, n, eps := int(a[0].Int), int(a[1].Int), a[2].Float
	pa, pb, sum, w, out := a[3].Ptr(), a[4].Ptr(), a[5].Ptr(), a[6].Ptr(), a[7].Ptr()
	xdt, odt := l.DTypes[0], l.DTypes[1]
	var f Launch
	var err error
	if len(a) == 10 {
		xq := a[8].Ptr()
		norm, err = RMSNormQ8X(xdt, odt, out, sum, w, xq, rows, n, eps)
		if err == nil {
			f, err = AddRMSNormQ8X(xdt, odt, sum, out, pa, pb, w, xq, rows, n, eps)
		}
	} else {
		norm, err = RMSNorm(xdt, odt, out, sum, w, rows, n, eps)
		if err == nil {
			f, err = AddRMSNorm(xdt, odt, sum, out, pa, pb, w, rows, n, eps)
		}
	}
	if err != nil || !reflect.DeepEqual(f, l) {
		return Launch{}, Launch{}, false
	}
	add, err = Elementwise("add", xdt, rows*n, pa, pb, sum)
	return add, norm, err == nil
}

// unfuseAddNorms is steps with every fused add and norm split again: the
// add in its place, the norm right after it, at the start of the next step
// where the add ends its own (the norm's step in the plans). It also
// returns how many it split.
func unfuseAddNorms(steps [][]Launch) ([][]Launch, int) {
	return unfusePairs(steps, nil, unfuseAddNorm)
}

// unfusePairs is steps with every launch split splits replaced by the two:
// the first in its place, the second right after it or, where the first
// ends its step, opening the next step (like nil) or the first later step
// where like, the stream before the fusion, has it. It also returns how
// many it split.
func unfusePairs(steps, like [][]Launch, split func(Launch) (a, b Launch, ok bool)) ([][]Launch, int) {
	out := make([][]Launch, len(steps))
	n := 0
	carry := map[int][]Launch{}
	for i, ls := range steps {
		out[i] = append(out[i], carry[i]...)
		for j, l := range ls {
			a, b, ok := split(l)
			if !ok {
				out[i] = append(out[i], l)
				continue
			}
			n++
			out[i] = append(out[i], a)
			at := i
			if j == len(ls)-1 && i < len(steps)-1 {
				at = i + 1
				for m := i + 1; like != nil && m < len(like) && m < len(steps); m++ {
					if slices.ContainsFunc(like[m], func(x Launch) bool { return reflect.DeepEqual(x, b) }) {
						at = m
						break
					}
				}
			}
			if at == i {
				out[i] = append(out[i], b)
			} else {
				carry[at] = append(carry[at], b)
			}
		}
	}
	return out, n
}

// mustLaunch is a test's check of a launch builder's result: the launch,
// or the test fails.
func mustLaunch(t *testing.T) func(Launch, error) Launch {
	return func(l Launch, err error) Launch {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// TestFuseAddNorm: an add and the norm of its sum right after it become
// one launch at the add's place, across a step boundary or empty steps
// too, with or without the norm's quantised copy; and nothing changes
// when the norm reads anything else, in another dtype, of another size,
// writes over the add's operands, or a launch sits between them.
func TestFuseAddNorm(t *testing.T) {
	const H = 3072
	arena := func(off int64) Ptr { return Ptr{BaseArena, off} }
	w, xq := Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}
	must := mustLaunch(t)
	// The residual a + b at 2*H*2, the norm's output at 3*H*2 (bf16).
	a, b, sum, out := arena(0), arena(H*2), arena(2*H*2), arena(3*H*2)
	add := must(Elementwise("add", "bf16", H, a, b, sum))
	norm := must(RMSNorm("bf16", "bf16", out, sum, w, 1, H, 1e-6))
	normQ := must(RMSNormQ8X("bf16", "bf16", out, sum, w, xq, 1, H, 1e-6))
	fused := must(AddRMSNorm("bf16", "bf16", sum, out, a, b, w, 1, H, 1e-6))
	fusedQ := must(AddRMSNormQ8X("bf16", "bf16", sum, out, a, b, w, xq, 1, H, 1e-6))
	other := must(Elementwise("silu", "bf16", H, out, arena(8*H*2)))
	// Short rows: the warp kernels; three rows of 256.
	addW := must(Elementwise("add", "f32", 3*256, a, b, arena(16384)))
	normW := must(RMSNorm("f32", "bf16", arena(32768), arena(16384), w, 3, 256, 1e-5))
	fusedW := must(AddRMSNorm("f32", "bf16", arena(16384), arena(32768), a, b, w, 3, 256, 1e-5))
	// The add in place (sum = a), as a residual accumulated into.
	addIn := must(Elementwise("add", "bf16", H, a, b, a))
	normIn := must(RMSNorm("bf16", "bf16", out, a, w, 1, H, 1e-6))
	fusedIn := must(AddRMSNorm("bf16", "bf16", a, out, a, b, w, 1, H, 1e-6))

	for _, c := range []struct {
		name        string
		steps, want [][]Launch
	}{
		{"one step", [][]Launch{{add, norm}}, [][]Launch{{fused}}},
		{"next step", [][]Launch{{other, add}, {norm, other}}, [][]Launch{{other, fused}, {other}}},
		{"past empty steps", [][]Launch{{add}, {}, nil, {norm}}, [][]Launch{{fused}, {}, nil, nil}},
		{"q8x", [][]Launch{{add}, {normQ}}, [][]Launch{{fusedQ}, nil}},
		{"warp", [][]Launch{{addW}, {normW}}, [][]Launch{{fusedW}, nil}},
		{"in place", [][]Launch{{addIn}, {normIn}}, [][]Launch{{fusedIn}, nil}},
		{"two", [][]Launch{{add}, {norm}, {addIn}, {normIn}}, [][]Launch{{fused}, nil, {fusedIn}, nil}},
		{"x is not the sum", [][]Launch{{add}, {must(RMSNorm("bf16", "bf16", out, a, w, 1, H, 1e-6))}}, nil},
		{"x inside the sum", [][]Launch{{add}, {must(RMSNorm("bf16", "bf16", out, sum.At(2), w, 1, H-8, 1e-6))}}, nil},
		{"dtype differs", [][]Launch{{must(Elementwise("add", "f32", H, a, b, sum))}, {must(RMSNorm("bf16", "bf16", out, sum, w, 1, H, 1e-6))}}, nil},
		{"fewer rows", [][]Launch{{must(Elementwise("add", "bf16", 2*H, a, b, sum))}, {norm}}, nil},
		{"more values", [][]Launch{{must(Elementwise("add", "bf16", 1024, a, b, sum))}, {must(RMSNorm("bf16", "bf16", out, sum, w, 1, 2048, 1e-6))}}, nil},
		{"out over a", [][]Launch{{add}, {must(RMSNorm("bf16", "bf16", a.At(64), sum, w, 1, H, 1e-6))}}, nil},
		{"out over b", [][]Launch{{add}, {must(RMSNorm("bf16", "bf16", arena(H), sum, w, 1, H, 1e-6))}}, nil},
		{"out is the sum", [][]Launch{{add}, {must(RMSNorm("bf16", "bf16", sum, sum, w, 1, H, 1e-6))}}, nil},
		{"copy over a", [][]Launch{{add}, {must(RMSNormQ8X("bf16", "bf16", out, sum, w, a, 1, H, 1e-6))}}, nil},
		{"a launch between", [][]Launch{{add, other, norm}}, nil},
		{"a launch between steps", [][]Launch{{add}, {other}, {norm}}, nil},
		{"the norm first", [][]Launch{{norm, add}}, nil},
		{"not an add", [][]Launch{{must(Elementwise("mul", "bf16", H, a, b, sum))}, {norm}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := runFusions(t, c.steps, c.want, fuseAddNorm)
			if c.want == nil {
				return
			}
			back, n := unfuseAddNorms(got)
			if n == 0 || !launchStreamsEqual(flatten(back), flatten(c.steps)) {
				t.Errorf("split again:\n%s\nwant\n%s", streamString(back), streamString(c.steps))
			}
		})
	}
}

// launchStreamsEqual compares streams step by step, an empty step equal
// to a nil one.
// runFusions runs the fusions on a copy of steps and fails unless the
// result is want (nil: steps unchanged); it returns the result.
func runFusions(t *testing.T, steps, want [][]Launch, fusions ...func([][]Launch)) [][]Launch {
	t.Helper()
	if want == nil {
		want = steps
	}
	got := make([][]Launch, len(steps))
	for i, ls := range steps {
		got[i] = append([]Launch(nil), ls...)
	}
	for _, f := range fusions {
		f(got)
	}
	if !launchStreamsEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", streamString(got), streamString(want))
	}
	return got
}

func launchStreamsEqual(a, b [][]Launch) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) || (len(a[i]) > 0 && !reflect.DeepEqual(a[i], b[i])) {
			return false
		}
	}
	return true
}

// flatten is steps as one step.
func flatten(steps [][]Launch) [][]Launch {
	var all []Launch
	for _, ls := range steps {
		all = append(all, ls...)
	}
	return [][]Launch{all}
}

// TestAddRMSNormArgs: the fused launch is the norm's geometry with the
// add's pointers, and the builder refuses what would race or misread.
func TestAddRMSNormArgs(t *testing.T) {
	p := func(off int64) Ptr { return Ptr{BaseArena, off} }
	w, xq := Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}
	for _, c := range []struct{ rows, n int }{{1, 3072}, {5, 37}, {3, 1024}, {2, 4096}, {4, 256}} {
		l, err := AddRMSNorm("bf16", "f32", p(1<<20), p(2<<20), p(0), p(1<<19), w, c.rows, c.n, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := RMSNorm("bf16", "f32", p(2<<20), p(1<<20), w, c.rows, c.n, 1e-6)
		if l.Kernel != "add_"+n.Kernel || l.Grid != n.Grid || l.Block != n.Block || l.Shmem != n.Shmem || !reflect.DeepEqual(l.DTypes, n.DTypes) || len(l.Args) != 8 {
			t.Errorf("%dx%d: %s, norm %s", c.rows, c.n, l, n)
		}
	}
	const H = 1024
	for name, err := range map[string]error{
		"null a": func() error {
			_, err := AddRMSNorm("f32", "f32", p(0), p(8192), Ptr{}, p(4096), w, 1, H, 1e-6)
			return err
		}(),
		"null b": func() error {
			_, err := AddRMSNorm("f32", "f32", p(0), p(8192), p(4096), Ptr{}, w, 1, H, 1e-6)
			return err
		}(),
		"bad dtype": func() error {
			_, err := AddRMSNorm("i32", "f32", p(0), p(8192), p(4096), p(4096), w, 1, H, 1e-6)
			return err
		}(),
		"sum over a": func() error {
			_, err := AddRMSNorm("f32", "f32", p(4), p(8192), p(0), p(16384), w, 1, H, 1e-6)
			return err
		}(),
		"sum over b": func() error {
			_, err := AddRMSNorm("f32", "f32", p(0), p(8192), p(16384), p(4), w, 1, H, 1e-6)
			return err
		}(),
		"out over a": func() error {
			_, err := AddRMSNorm("f32", "f32", p(0), p(8192), p(8192), p(16384), w, 1, H, 1e-6)
			return err
		}(),
		"out is sum": func() error {
			_, err := AddRMSNorm("f32", "f32", p(0), p(0), p(8192), p(16384), w, 1, H, 1e-6)
			return err
		}(),
		"sum over w": func() error {
			_, err := AddRMSNorm("f32", "f32", p(0), p(8192), p(16384), p(24576), p(0), 1, H, 1e-6)
			return err
		}(),
		"q8x n": func() error {
			_, err := AddRMSNormQ8X("f32", "f32", p(0), p(8192), p(16384), p(24576), w, xq, 1, 1000, 1e-6)
			return err
		}(),
		"q8x over a": func() error {
			_, err := AddRMSNormQ8X("f32", "f32", p(0), p(8192), p(16384), p(24576), w, p(16384), 1, H, 1e-6)
			return err
		}(),
		"q8x over sum": func() error {
			_, err := AddRMSNormQ8X("f32", "f32", p(0), p(8192), p(16384), p(24576), w, p(0), 1, H, 1e-6)
			return err
		}(),
		"q8x unaligned": func() error {
			_, err := AddRMSNormQ8X("f32", "f32", p(0), p(8192), p(16384), p(24576), w, xq.At(8), 1, H, 1e-6)
			return err
		}(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// sum may be a or b: the add in place.
	for _, sum := range []Ptr{p(0), p(4096)} {
		if _, err := AddRMSNorm("f32", "f32", sum, p(8192), p(0), p(4096), w, 1, H, 1e-6); err != nil {
			t.Errorf("sum %s: %v", sum, err)
		}
	}
}
