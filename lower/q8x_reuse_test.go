package lower

import (
	"fmt"
	"reflect"
	"testing"

	"lagc/quant"
)

// q8xTestLaunch and qgemvTestLaunch build the launches the reuse tests
// combine: x [rows, K] bf16 at arena+xoff quantised to workspace+0, and a
// qgemv of N outputs reading it and writing y at arena+yoff.
func q8xTestLaunch(t *testing.T, rows, K int, xoff int64) Launch {
	t.Helper()
	q, err := Q8XQuantize("bf16", Ptr{BaseArena, xoff}, Ptr{BaseWorkspace, 0}, rows, K)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func qgemvTestLaunch(t *testing.T, rows, K, N int, yoff int64) Launch {
	t.Helper()
	g, err := QGEMV(QGEMVArgs{T: rows, K: K, N: N, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 0}, WType: quant.Q8_0,
		WRows: N, Y: Ptr{BaseArena, yoff}, YType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestQ8XLaunchArgs: what the reuse reads off q8x_quantize and qgemv
// launches is what their builders were given.
func TestQ8XLaunchArgs(t *testing.T) {
	for _, c := range []struct{ rows, K, N int }{{1, 64, 96}, {3, 3072, 1024}, {8, 32, 5}} {
		x, n, ok := q8xSource(q8xTestLaunch(t, c.rows, c.K, 512))
		if want := int64(2 * c.rows * c.K); !ok || x != (Ptr{BaseArena, 512}) || n != want {
			t.Errorf("%+v: q8x source %v %d %v, want arena+512 %d", c, x, n, ok, want)
		}
		y, n, ok := qgemvOutput(qgemvTestLaunch(t, c.rows, c.K, c.N, 4096))
		if want := int64(2 * c.rows * c.N); !ok || y != (Ptr{BaseArena, 4096}) || n != want {
			t.Errorf("%+v: qgemv output %v %d %v, want arena+4096 %d", c, y, n, ok, want)
		}
	}
	// A source overlapping the quantised copy is never held.
	q, err := Q8XQuantize("f32", Ptr{BaseWorkspace, 256}, Ptr{BaseWorkspace, 0}, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := q8xSource(q); ok {
		t.Errorf("a source inside the quantised copy is accepted: %s", q)
	}
}

// TestReuseQ8X: a repeated quantisation is dropped exactly when nothing
// since the first could have changed its source or its result.
func TestReuseQ8X(t *testing.T) {
	const K, N = 64, 32
	q := q8xTestLaunch(t, 1, K, 0)         // x at arena [0, 128)
	g := qgemvTestLaunch(t, 1, K, N, 1024) // y at arena [1024, 1088)
	other := memcpy(Ptr{BaseArena, 2048}, Ptr{BaseArena, 4096}, 64)
	bad := g
	bad.Args = bad.Args[:8] // not a qgemv as QGEMV builds it
	for _, c := range []struct {
		name   string
		steps  [][]Launch
		remove [][2]int // (step, launch) dropped
	}{
		{"repeat after a qgemv", [][]Launch{{q, g}, {q, g}}, [][2]int{{1, 0}}},
		{"repeat in one step", [][]Launch{{q, g, q, g, q, g}}, [][2]int{{0, 2}, {0, 4}}},
		{"after two qgemvs", [][]Launch{{q, g}, {g}, {q, g}}, [][2]int{{2, 0}}},
		{"the qgemv writes over x", [][]Launch{{q, qgemvTestLaunch(t, 1, K, N, 64)}, {q, g}}, nil},
		{"the qgemv writes just past x", [][]Launch{{q, qgemvTestLaunch(t, 1, K, N, 128)}, {q, g}}, [][2]int{{1, 0}}},
		{"another kernel between", [][]Launch{{q, g}, {other}, {q, g}}, nil},
		{"a qgemv that does not read as one", [][]Launch{{q, bad}, {q, g}}, nil},
		{"another quantisation between", [][]Launch{{q, g}, {q8xTestLaunch(t, 1, K, 256), g}, {q, g}}, nil},
		{"other rows of x", [][]Launch{{q, g}, {q8xTestLaunch(t, 2, K, 0), g}}, nil},
		{"x elsewhere", [][]Launch{{q, g}, {q8xTestLaunch(t, 1, K, 128), g}}, nil},
		{"x of another dtype", [][]Launch{{q, g}, {func() Launch { l := q; l.DTypes = []string{"f32"}; return l }(), g}}, nil},
		{"back to back", [][]Launch{{q}, {q, g}}, [][2]int{{1, 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := make([][]Launch, len(c.steps))
			for i, ls := range c.steps {
				for j, l := range ls {
					dropped := false
					for _, r := range c.remove {
						dropped = dropped || r == [2]int{i, j}
					}
					if !dropped {
						want[i] = append(want[i], l)
					}
				}
			}
			got := make([][]Launch, len(c.steps))
			copy(got, c.steps)
			reuseQ8X(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%s\nwant\n%s", streamString(got), streamString(want))
			}
		})
	}
}

func streamString(steps [][]Launch) string {
	s := ""
	for i, ls := range steps {
		for _, l := range ls {
			s += fmt.Sprintf("  step %d: %s\n", i, l)
		}
	}
	return s
}
