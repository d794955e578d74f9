package vec

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// beforeGuard returns n bytes ending where an inaccessible page begins: a
// kernel reading one byte past them faults.
func beforeGuard(t *testing.T, n int) []byte {
	t.Helper()
	page := unix.Getpagesize()
	size := (n/page + 2) * page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	if err := unix.Mprotect(mem[size-page:], unix.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	return mem[size-page-n : size-page]
}

// floatsBeforeGuard is beforeGuard for n floats.
func floatsBeforeGuard(t *testing.T, n int) []float32 {
	b := beforeGuard(t, 4*n)
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

// TestNoReadPastEnd: the masked loads of the last elements read nothing
// past the operands, which may end at the end of mapped memory.
func TestNoReadPastEnd(t *testing.T) {
	paths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 7))
		for _, c := range []struct{ rows, k int }{{1, 1}, {3, 5}, {8, 13}, {9, 127}, {13, 3}, {5, 24}, {2, 31}} {
			a, x := floatsBeforeGuard(t, c.rows*c.k), floatsBeforeGuard(t, c.k)
			copy(a, randFloats(r, len(a)))
			copy(x, randFloats(r, len(x)))
			y := make([]float32, c.rows)
			Dots(y, a, c.k, x)
			ref, mag := dotsRef(a, c.k, x, c.rows)
			for i := range y {
				if !within(y[i], ref[i], mag[i], c.k) {
					t.Fatalf("Dots %+v: y[%d] = %g, want %g", c, i, y[i], ref[i])
				}
			}
			h := beforeGuard(t, 2*c.rows*c.k)
			copy(h, bf16Rows(r, c.rows*c.k))
			DotsBF16(y, h, c.k, x)
			// AddScaled over the transposed shape: c.k columns, c.rows rows.
			ys := make([]float32, c.k)
			AddScaled(ys, a, c.k, floatsBeforeGuard(t, c.rows))
		}
	})
}
