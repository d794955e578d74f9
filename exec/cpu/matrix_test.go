package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"lagc/quant"
)

// storedTypes are the non-f32 types quant converts both ways: the plain
// 16-bit floats and every block type it can produce.
func storedTypes(t testing.TB) []quant.Type {
	var out []quant.Type
	for ty := range quant.Type(256) {
		if ty != quant.F32 && ty.Supported() && ty.CanQuantize() {
			out = append(out, ty)
		}
	}
	if len(out) < 3 {
		t.Fatalf("quant converts only %v", out)
	}
	return out
}

// quantised stores w [rows, cols] as t and returns the Matrix and its
// dequantised float32 copy, the reference.
func quantised(t testing.TB, ty quant.Type, w []float32, rows, cols int) (*Matrix, []float32) {
	t.Helper()
	rb, err := ty.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, int(rb)*rows)
	if err := quant.Quantize(ty, raw, w); err != nil {
		t.Fatal(err)
	}
	m, err := NewMatrix(ty, raw, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, rows*cols)
	if err := quant.Dequantize(ty, deq, raw); err != nil {
		t.Fatal(err)
	}
	return m, deq
}

// TestStoredMatrices: every kernel that reads a Matrix gives, on a matrix
// kept in a stored type, bitwise the result of the f32 kernel on its
// dequantised copy, for any token count and thread count.
func TestStoredMatrices(t *testing.T) {
	for _, ty := range storedTypes(t) {
		Ks := []int{2 * max(ty.BlockElems(), 32)}
		if ty.BlockElems() == 1 {
			// Rows the bf16 kernels take whole, in part and not at all.
			Ks = append(Ks, 40, 13)
		}
		for _, sh := range []struct{ T, N, K int }{{1, 7, 0}, {5, 64, 0}, {40, 300, 0}, {1, 9, 1}, {3, 17, 2}} {
			if sh.K >= len(Ks) {
				continue
			}
			K := Ks[sh.K]
			t.Run(fmt.Sprintf("%s/T=%d,N=%d,K=%d", ty, sh.T, sh.N, K), func(t *testing.T) {
				T, N := sh.T, sh.N
				x := randSlice(1, T*K, 1)
				m, deq := quantised(t, ty, randSlice(2, 2*N*K, 0.5), 2*N, K)
				for _, threads := range []int{1, 0} {
					withThreads(threads, func() {
						got, want := make([]float32, T*2*N), make([]float32, T*2*N)
						mustTB(t, MatMulMatrix(got, x, m, T))
						mustTB(t, MatMul(want, x, deq, T, K, 2*N))
						requireBitwise(t, "matmul", got, want)

						got, want = make([]float32, T*N), make([]float32, T*N)
						mustTB(t, matmulSwiGLU(got, x, m, T))
						mustTB(t, MatMulSwiGLU(want, x, deq, T, K, N))
						requireBitwise(t, "matmul_swiglu", got, want)

						r := randSlice(3, T*2*N, 1)
						got, want = make([]float32, T*2*N), make([]float32, T*2*N)
						mustTB(t, matmulAdd(got, x, r, m, T))
						mustTB(t, MatMulAdd(want, x, deq, r, T, K, 2*N))
						requireBitwise(t, "matmul_add", got, want)

						sizes := []int{N - 3, 3, N}
						outs := [][]float32{make([]float32, T*(N-3)), make([]float32, T*3), make([]float32, T*N)}
						wants := [][]float32{make([]float32, T*(N-3)), make([]float32, T*3), make([]float32, T*N)}
						if N > 3 {
							mustTB(t, matmulSplit(outs, x, m, T, sizes))
							mustTB(t, MatMulSplit(wants, x, deq, T, K, sizes))
							for i := range outs {
								requireBitwise(t, "matmul_split", outs[i], wants[i])
							}
						}

						ids := []int32{0, int32(2*N - 1), int32(N)}
						got, want = make([]float32, 3*K), make([]float32, 3*K)
						mustTB(t, embedding(got, ids, m))
						mustTB(t, Embedding(want, ids, deq, 2*N, K))
						requireBitwise(t, "embedding", got, want)
					})
				}
			})
		}
	}
}

// TestStoredExperts: the experts on stacks kept in a stored type equal the
// experts on their dequantised copies, in both MoE kernels.
func TestStoredExperts(t *testing.T) {
	for _, ty := range storedTypes(t) {
		be := max(ty.BlockElems(), 32)
		T, H, E, I, k := 6, be, 4, be, 2
		c := newMoECase(t, T, H, E, I, k, true)
		gate, gateD := quantised(t, ty, c.gate, E*I, H)
		up, upD := quantised(t, ty, c.up, E*I, H)
		down, downD := quantised(t, ty, c.down, E*H, I)
		want := make([]float32, T*H)
		mustTB(t, MoEExperts(want, c.x, c.w, c.ids, gateD, upD, downD, T, H, E, I, k))
		got := make([]float32, T*H)
		mustTB(t, moeExperts(got, c.x, c.w, c.ids, gate, up, down, T, H, E, I, k))
		requireBitwise(t, ty.String()+" moe_experts", got, want)
		m := &GroupedMoE{T: T, H: H, I: I, K: k, E: E, Gate: gate, Up: up, Down: down}
		got = make([]float32, T*H)
		mustTB(t, MoEGrouped(got, c.x, c.w, c.ids, m))
		requireBitwise(t, ty.String()+" moe_grouped", got, want)
	}
}

func TestNewMatrixErrors(t *testing.T) {
	for _, c := range []struct {
		name       string
		ty         quant.Type
		raw        int
		rows, cols int
		want       string
	}{
		{"f32", quant.F32, 16, 2, 2, "MatrixF32"},
		{"empty", quant.Q8_0, 0, 0, 32, "must be positive"},
		{"half a block", quant.Q8_0, 2 * 18, 2, 16, "not a whole number"},
		{"short", quant.Q8_0, 34, 2, 32, "got 34 bytes"},
		{"unknown type", quant.Type(99), 8, 1, 4, "cannot be converted"},
	} {
		_, err := NewMatrix(c.ty, make([]byte, c.raw), c.rows, c.cols)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzStoredMatMul: any type, shape and bytes give an error or the matmul
// of the dequantised matrix, never a panic.
func FuzzStoredMatMul(f *testing.F) {
	f.Add(uint8(quant.Q8_0), uint8(2), uint8(32), uint8(1), []byte{1, 2, 3})
	f.Add(uint8(quant.BF16), uint8(3), uint8(5), uint8(2), []byte{})
	f.Add(uint8(200), uint8(1), uint8(1), uint8(1), []byte{0})
	f.Fuzz(func(t *testing.T, ty, rows, cols, T uint8, seed []byte) {
		qt := quant.Type(ty)
		rb, err := qt.RowBytes(int(cols))
		if err != nil || rb > 1<<12 {
			rb = int64(len(seed))
		}
		raw := make([]byte, int(rb)*int(rows))
		for i := range raw {
			if len(seed) > 0 {
				raw[i] = seed[i%len(seed)] + byte(i)
			}
		}
		m, err := NewMatrix(qt, raw, int(rows), int(cols))
		if err != nil {
			return
		}
		x := randSlice(uint64(T), int(T)*int(cols), 1)
		y := make([]float32, int(T)*int(rows))
		if err := MatMulMatrix(y, x, m, int(T)); err != nil {
			if T != 0 {
				t.Fatalf("valid matrix %s [%d,%d], T=%d: %v", qt, rows, cols, T, err)
			}
			return
		}
		deq := make([]float32, int(rows)*int(cols))
		if err := quant.Dequantize(qt, deq, raw); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(y))
		mustTB(t, MatMul(want, x, deq, int(T), int(cols), int(rows)))
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
				t.Fatalf("element %d: %g on the stored matrix, %g on its dequantised copy", i, y[i], want[i])
			}
		}
	})
}
