package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// paths runs f once per implementation this machine has.
func paths(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if best() != avx512Kernels {
		t.Logf("this machine runs %s at best: the wider kernels are not checked", best())
	}
	// gonum names the scalar Go loops of the element-wise functions too.
	for k := best(); k >= gonumKernels; k-- {
		withKernels(k, func() { t.Run(k.String(), f) })
	}
}

// withKernels runs f on kernels k.
func withKernels(k kernels, f func()) {
	saved := use
	defer func() { use = saved }()
	use = k
	f()
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// within reports whether got is the float64 sum ref within the error bound
// of any float32 summation order of n products: (n+2) units in the last
// place of mag, the sum of the products' magnitudes.
func within(got float32, ref, mag float64, n int) bool {
	return math.Abs(float64(got)-ref) <= float64(n+2)*0x1p-24*mag
}

// dotsRef is the float64 dot product of each row with x, and the sum of
// the products' magnitudes.
func dotsRef(a []float32, lda int, x []float32, rows int) (ref, mag []float64) {
	ref, mag = make([]float64, rows), make([]float64, rows)
	for r := range rows {
		for i, xv := range x {
			p := float64(a[r*lda+i]) * float64(xv)
			ref[r] += p
			mag[r] += math.Abs(p)
		}
	}
	return ref, mag
}

// shift returns a copy of v starting off floats past a 64-byte boundary.
func shift(v []float32, off int) []float32 {
	buf := AlignedFloats(len(v) + off)
	s := buf[off : off+len(v)]
	copy(s, v)
	return s
}

// checkDots checks Dots on rows x k (rows lda apart) against the float64
// reference, and that every row's result is bitwise the same computed
// alone, in any group of rows, and with the operands moved in memory.
func checkDots(t *testing.T, seed uint64, rows, k, pad, off int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	lda := k + pad
	a := randFloats(r, max(0, (rows-1)*lda+k))
	x := randFloats(r, k)
	y := make([]float32, rows)
	Dots(y, a, lda, x)
	ref, mag := dotsRef(a, lda, x, rows)
	for i := range y {
		if !within(y[i], ref[i], mag[i], k) {
			t.Fatalf("rows %d k %d lda %d: y[%d] = %g, float64 reference %g", rows, k, lda, i, y[i], ref[i])
		}
	}
	// Every row alone, and the rows from each start on.
	for i := range rows {
		one := make([]float32, 1)
		Dots(one, a[i*lda:], lda, x)
		if one[0] != y[i] {
			t.Fatalf("rows %d k %d: row %d alone gives %g, in the block %g", rows, k, i, one[0], y[i])
		}
		rest := make([]float32, rows-i)
		Dots(rest, a[i*lda:], lda, x)
		for j, v := range rest {
			if v != y[i+j] {
				t.Fatalf("rows %d k %d: row %d from row %d on gives %g, in the block %g", rows, k, i+j, i, v, y[i+j])
			}
		}
	}
	// The operands elsewhere in memory.
	ys := shift(make([]float32, rows), (off+5)%16)
	Dots(ys, shift(a, off), lda, shift(x, (off+3)%16))
	for i := range y {
		if ys[i] != y[i] {
			t.Fatalf("rows %d k %d: y[%d] moved in memory (offset %d) = %g, was %g", rows, k, i, off, ys[i], y[i])
		}
	}
}

func TestDots(t *testing.T) {
	paths(t, func(t *testing.T) {
		for _, rows := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 23, 64} {
			for _, k := range []int{0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 127, 128, 130, 512} {
				for _, pad := range []int{0, 5} {
					checkDots(t, uint64(rows*1000+k), rows, k, pad, (rows+k+pad)%16)
				}
			}
		}
	})
}

// bf16Rows returns n random bfloat16 values as bytes.
func bf16Rows(r *rand.Rand, n int) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		h := math.Float32bits(float32(r.NormFloat64())) >> 16
		b[2*i], b[2*i+1] = byte(h), byte(h>>8)
	}
	return b
}

// checkDotsBF16 checks that DotsBF16 gives bitwise Dots on the widened
// rows, wherever the operands lie.
func checkDotsBF16(t *testing.T, seed uint64, rows, k, pad, off int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	lda := k + pad
	n := max(0, (rows-1)*lda+k)
	a := bf16Rows(r, n)
	x := randFloats(r, k)
	wide := make([]float32, n)
	WidenBF16(wide, a)
	want := make([]float32, rows)
	Dots(want, wide, lda, x)
	got := make([]float32, rows)
	DotsBF16(got, a, lda, x)
	moved := make([]byte, len(a)+2*off+1)[2*off+1:]
	copy(moved, a)
	gotMoved := make([]float32, rows)
	DotsBF16(gotMoved, moved, lda, shift(x, (off+9)%16))
	for i := range want {
		if got[i] != want[i] || gotMoved[i] != want[i] {
			t.Fatalf("rows %d k %d lda %d: row %d: bf16 %g (moved %g), widened float32 %g", rows, k, lda, i, got[i], gotMoved[i], want[i])
		}
	}
}

func TestDotsBF16(t *testing.T) {
	paths(t, func(t *testing.T) {
		for _, rows := range []int{1, 3, 4, 8, 9, 13, 64} {
			for _, k := range []int{0, 1, 7, 8, 9, 16, 24, 32, 64, 100, 128, 512} {
				for _, pad := range []int{0, 8, 3} {
					checkDotsBF16(t, uint64(rows*1000+k), rows, k, pad, (rows+k)%16)
				}
			}
		}
	})
}

// TestWidenBF16 against quant's definition: the bits shifted up by 16.
func TestWidenBF16(t *testing.T) {
	src := []byte{0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f, 0xc1, 0xff, 0x00, 0x80}
	want := []uint32{0x3f800000, 0xc0000000, 0x7f800000, 0xffc10000, 0x80000000}
	dst := make([]float32, len(want))
	WidenBF16(dst, src)
	for i, w := range want {
		if math.Float32bits(dst[i]) != w {
			t.Errorf("value %d: bits %#x, want %#x", i, math.Float32bits(dst[i]), w)
		}
	}
}

// addScaledRef is the float64 y0 + sum_i x[i]*a[i,:] and the sum of the
// terms' magnitudes.
func addScaledRef(y0, a []float32, lda int, x []float32) (ref, mag []float64) {
	ref, mag = make([]float64, len(y0)), make([]float64, len(y0))
	for c, v := range y0 {
		ref[c], mag[c] = float64(v), math.Abs(float64(v))
		for i, xv := range x {
			p := float64(a[i*lda+c]) * float64(xv)
			ref[c] += p
			mag[c] += math.Abs(p)
		}
	}
	return ref, mag
}

func TestAddScaled(t *testing.T) {
	paths(t, func(t *testing.T) {
		for _, n := range []int{1, 3, 7, 8, 9, 31, 32, 33, 40, 64, 71} {
			for _, m := range []int{0, 1, 2, 5, 16, 100} {
				for _, pad := range []int{0, 3} {
					checkAddScaled(t, uint64(n*1000+m), n, m, pad, (n+m)%16)
				}
			}
		}
	})
}

// checkAddScaled checks AddScaled against the float64 reference, and that
// each column's result is bitwise the same whatever columns are computed
// with it and wherever the operands lie.
func checkAddScaled(t *testing.T, seed uint64, n, m, pad, off int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 2))
	lda := n + pad
	a := randFloats(r, max(0, (m-1)*lda+n))
	x := randFloats(r, m)
	y0 := randFloats(r, n)
	y := append([]float32(nil), y0...)
	AddScaled(y, a, lda, x)
	ref, mag := addScaledRef(y0, a, lda, x)
	for c := range y {
		if !within(y[c], ref[c], mag[c], m+1) {
			t.Fatalf("n %d m %d: y[%d] = %g, float64 reference %g", n, m, c, y[c], ref[c])
		}
	}
	if m == 0 {
		return
	}
	for c := range n {
		rest := append([]float32(nil), y0[c:]...)
		AddScaled(rest, a[c:], lda, x)
		one := []float32{y0[c]}
		AddScaled(one, a[c:], lda, x)
		if rest[0] != y[c] || one[0] != y[c] {
			t.Fatalf("n %d m %d: column %d gives %g from column %d on and %g alone, %g with all", n, m, c, rest[0], c, one[0], y[c])
		}
	}
	ys := shift(y0, (off+7)%16)
	AddScaled(ys, shift(a, off), lda, shift(x, (off+1)%16))
	for c := range y {
		if ys[c] != y[c] {
			t.Fatalf("n %d m %d: y[%d] moved in memory = %g, was %g", n, m, c, ys[c], y[c])
		}
	}
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		env        string
		best, want kernels
		note       string
	}{
		{"", avx512Kernels, avx512Kernels, ""},
		{"gonum", avx512Kernels, gonumKernels, ""},
		{"avx2-fma", avx512Kernels, fmaKernels, ""},
		{"avx512", fmaKernels, fmaKernels, "this machine runs avx2-fma at best"},
		{"sse", fmaKernels, fmaKernels, `"sse" ignored: want avx512, avx2-fma or gonum`},
	} {
		got, note := fromEnv(c.env, c.best)
		if got != c.want || c.note == "" && note != "" || !strings.Contains(note, c.note) {
			t.Errorf("%s=%q with %s at best: %s, note %q; want %s, note with %q", EnvKernels, c.env, c.best, got, note, c.want, c.note)
		}
	}
}

// TestDotsShortOperands: the kernels check the lengths they are given.
func TestDotsShortOperands(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Dots a short", func() { Dots(make([]float32, 2), make([]float32, 7), 4, make([]float32, 4)) }},
		{"Dots lda < k", func() { Dots(make([]float32, 2), make([]float32, 16), 3, make([]float32, 4)) }},
		{"AddScaled a short", func() { AddScaled(make([]float32, 4), make([]float32, 7), 4, make([]float32, 2)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			c.f()
		})
	}
}

func FuzzDots(f *testing.F) {
	f.Add(uint64(1), uint8(9), uint16(130), uint8(3), uint8(5))
	f.Add(uint64(2), uint8(1), uint16(7), uint8(0), uint8(0))
	f.Add(uint64(3), uint8(12), uint16(0), uint8(1), uint8(15))
	f.Fuzz(func(t *testing.T, seed uint64, rows uint8, k uint16, pad, off uint8) {
		if rows == 0 {
			return
		}
		k %= 2048
		for ks := best(); ks >= gonumKernels; ks-- {
			withKernels(ks, func() {
				checkDots(t, seed, int(rows%64)+1, int(k), int(pad%32), int(off%16))
				checkDotsBF16(t, seed, int(rows%64)+1, int(k), int(pad%32), int(off%16))
			})
		}
	})
}

func FuzzAddScaled(f *testing.F) {
	f.Add(uint64(1), uint8(33), uint16(17), uint8(3), uint8(5))
	f.Add(uint64(2), uint8(1), uint16(1), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, m uint16, pad, off uint8) {
		if n == 0 {
			return
		}
		checkAddScaled(t, seed, int(n), int(m%1024), int(pad%32), int(off%16))
	})
}

var sink float32

// BenchmarkDotsLarge: a matrix of rows x 128 against one vector, 64 rows a
// call, in float32 and in bfloat16: past the 1 MiB L2 the rows stream
// from L3, and bfloat16 reads half the bytes.
func BenchmarkDotsLarge(b *testing.B) {
	const K = 128
	for _, rows := range []int{2048, 16384} {
		r := rand.New(rand.NewPCG(1, 1))
		a, x, y := randFloats(r, rows*K), randFloats(r, K), make([]float32, 64)
		h := bf16Rows(r, rows*K)
		for ks := best(); ks >= fmaKernels; ks-- {
			b.Run(fmt.Sprintf("%s/f32/rows=%d", ks, rows), func(b *testing.B) {
				withKernels(ks, func() {
					for b.Loop() {
						for i := 0; i < rows; i += 64 {
							Dots(y, a[i*K:], K, x)
						}
					}
				})
				b.ReportMetric(float64(b.N)*float64(rows*K)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
			b.Run(fmt.Sprintf("%s/bf16/rows=%d", ks, rows), func(b *testing.B) {
				withKernels(ks, func() {
					for b.Loop() {
						for i := 0; i < rows; i += 64 {
							DotsBF16(y, h[2*i*K:], K, x)
						}
					}
				})
				b.ReportMetric(float64(b.N)*float64(rows*K)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// BenchmarkDots: 64 rows of K against one vector, as a matrix kernel's
// block computes them (y stays in cache; a is 64*K floats).
func BenchmarkDots(b *testing.B) {
	const rows = 64
	for _, K := range []int{32, 128, 512, 4096} {
		r := rand.New(rand.NewPCG(1, 1))
		a, x, y := randFloats(r, rows*K), randFloats(r, K), make([]float32, rows)
		for ks := best(); ks >= gonumKernels; ks-- {
			b.Run(fmt.Sprintf("%s/K=%d", ks, K), func(b *testing.B) {
				withKernels(ks, func() {
					for b.Loop() {
						Dots(y, a, K, x)
					}
				})
				sink = y[0]
				b.ReportMetric(float64(b.N)*rows*float64(K)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}
