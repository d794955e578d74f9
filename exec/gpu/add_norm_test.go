package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// TestAddRMSNormGPU: the fused add and norm (what fuseAddNorm makes of a
// residual add and the norm after it) writes the sum add writes and the
// output rms_norm then writes, and with _q8x the quantised copy
// rms_norm_q8x writes, bit for bit; and the CPU's add and norm, the sum
// exactly and the output within tolerance. The warp and block kernels,
// their 16-byte and element-wise paths (n not a multiple of 8, or sum and
// out one element off alignment), a and b off alignment on the 16-byte
// path, the add in place (sum = a), casts, and groups summing to zero.
func TestAddRMSNormGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(35, 36))
	const eps = 1e-6
	type tc struct {
		xdt, odt      cuda.DType
		rows, n       int
		q8x           bool
		offIn, offOut int64 // elements a and b, or sum and out, lie past an aligned address
		inPlace       bool  // sum is a
	}
	var cases []tc
	for _, dt := range DTypes {
		for _, c := range []struct{ rows, n int }{{1, 3072}, {5, 37}, {3, 1024}, {2, 4096}, {3, 1027}, {4, 256}, {2, 9000}} {
			cases = append(cases, tc{xdt: dt, odt: dt, rows: c.rows, n: c.n})
		}
		cases = append(cases,
			tc{xdt: dt, odt: dt, rows: 1, n: 3072, offOut: 1}, // block, element-wise
			tc{xdt: dt, odt: dt, rows: 72, n: 128, offOut: 1}, // warp, element-wise
			tc{xdt: dt, odt: dt, rows: 2, n: 3072, offIn: 1},  // 16-byte path, a and b loaded one by one
			tc{xdt: dt, odt: dt, rows: 9, n: 128, offIn: 1},
			tc{xdt: dt, odt: dt, rows: 3, n: 3072, inPlace: true},
			tc{xdt: dt, odt: dt, rows: 3, n: 1027, inPlace: true},
			tc{xdt: dt, odt: dt, rows: 1, n: 3072, q8x: true},
			tc{xdt: dt, odt: dt, rows: 3, n: 1024, q8x: true, inPlace: true},
			tc{xdt: dt, odt: dt, rows: 2, n: 4096, q8x: true},
			tc{xdt: dt, odt: dt, rows: 8, n: 8192, q8x: true}, // 1024 threads a block
			tc{xdt: dt, odt: dt, rows: 5, n: 256, q8x: true},  // warp
			tc{xdt: dt, odt: dt, rows: 3, n: 1024, q8x: true, offOut: 1},
			tc{xdt: dt, odt: dt, rows: 3, n: 256, q8x: true, offOut: 1},
			tc{xdt: dt, odt: dt, rows: 2, n: 3072, q8x: true, offIn: 1},
		)
	}
	cases = append(cases, tc{xdt: cuda.BF16, odt: cuda.F32, rows: 3, n: 3072}, tc{xdt: cuda.F32, odt: cuda.BF16, rows: 2, n: 1024, q8x: true},
		tc{xdt: cuda.BF16, odt: cuda.F32, rows: 4, n: 96, q8x: true})
	for _, c := range cases {
		name := fmt.Sprintf("%v-to-%v-%dx%d-q8x%v-off%d,%d-inplace%v", c.xdt, c.odt, c.rows, c.n, c.q8x, c.offIn, c.offOut, c.inPlace)
		t.Run(name, func(t *testing.T) {
			elems := c.rows * c.n
			a := roundTo(c.xdt, randF32(r, elems, 3))
			b := roundTo(c.xdt, randF32(r, elems, 3))
			if c.q8x {
				for row := 0; row < c.rows; row++ { // a group of zero sums
					for i := row*c.n + 32; i < row*c.n+64; i++ {
						b[i] = -a[i]
					}
				}
			}
			wHost := normWeights(r, c.n)
			w := upload(t, k, s, cuda.F32, wHost)
			es, eo := int64(c.xdt.Size()), int64(c.odt.Size())
			xBytes, oBytes, qBytes := int64(elems)*es, int64(elems)*eo, lower.Q8XBytes(c.rows, c.n)
			fill := func(p cuda.DevicePtr, n int64, v byte) {
				if err := s.Memset8(p, v, n); err != nil {
					t.Fatal(err)
				}
			}
			at := func(v []float32, off int64) cuda.DevicePtr {
				return upload(t, k, s, c.xdt, append(make([]float32, off), v...)).Add(off * es)
			}
			// run makes fresh buffers (the add in place overwrites a),
			// filled with v where they are outputs only.
			run := func(fused bool, v byte) (sum, out, xq cuda.DevicePtr) {
				da, db := at(a, c.offIn), at(b, c.offIn)
				sum = da
				if !c.inPlace {
					sum = alloc(t, k, xBytes+c.offOut*es).Add(c.offOut * es)
					fill(sum, xBytes, v)
				}
				out = alloc(t, k, oBytes+c.offOut*eo).Add(c.offOut * eo)
				fill(out, oBytes, v)
				if c.q8x {
					xq = alloc(t, k, qBytes)
					fill(xq, qBytes, v)
				}
				var err error
				switch {
				case fused && c.q8x:
					err = k.AddRMSNormQ8X(s, c.xdt, c.odt, sum, out, da, db, w, xq, c.rows, c.n, eps)
				case fused:
					err = k.AddRMSNorm(s, c.xdt, c.odt, sum, out, da, db, w, c.rows, c.n, eps)
				default:
					if err = k.Add(s, c.xdt, sum, da, db, elems); err != nil {
						break
					}
					if c.q8x {
						err = k.RMSNormQ8X(s, c.xdt, c.odt, out, sum, w, xq, c.rows, c.n, eps)
					} else {
						err = k.RMSNormCast(s, c.xdt, c.odt, out, sum, w, c.rows, c.n, eps)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				return sum, out, xq
			}
			// Different fills: a byte one of them leaves unwritten differs.
			gSum, gOut, gQ := run(true, 0xFF)
			wSum, wOut, wQ := run(false, 0x00)
			type part struct {
				what     string
				got, exp cuda.DevicePtr
				n        int64
			}
			parts := []part{{"sum", gSum, wSum, xBytes}, {"out", gOut, wOut, oBytes}}
			if c.q8x {
				vals, scales := q8xWritten(c.rows, c.n)
				parts = append(parts, part{"quantised values", gQ, wQ, vals},
					part{"quantised scales", gQ.Add(scales), wQ.Add(scales), qBytes - scales})
			}
			for _, p := range parts {
				if i := firstByteDiff(downloadBytes(t, s, p.got, p.n), downloadBytes(t, s, p.exp, p.n)); i >= 0 {
					t.Fatalf("%s: byte %d differs from add then rms_norm", p.what, i)
				}
			}
			// The CPU: the sum exactly (one rounding of an exact sum), the norm
			// within the output dtype's tolerance.
			sumRef := make([]float32, elems)
			if err := cpu.Add(sumRef, a, b); err != nil {
				t.Fatal(err)
			}
			sumRef = roundTo(c.xdt, sumRef)
			for i, v := range download(t, s, c.xdt, gSum, elems) {
				if v != sumRef[i] {
					t.Fatalf("sum[%d] = %v, the CPU's %v", i, v, sumRef[i])
				}
			}
			outRef := make([]float32, elems)
			if err := cpu.RMSNorm(outRef, sumRef, wHost, c.rows, c.n, eps); err != nil {
				t.Fatal(err)
			}
			checkClose(t, "add_rms_norm", download(t, s, c.odt, gOut, elems), outRef, tolFor(c.odt))
		})
	}
}

// TestAddRMSNormArgs: the launchers refuse what lower refuses.
func TestAddRMSNormArgs(t *testing.T) {
	k := &Kernels{}
	p := func(off int64) cuda.DevicePtr { return cuda.DevicePtr(1<<20 + off) }
	for name, err := range map[string]error{
		"rows 0":       k.AddRMSNorm(nil, cuda.F32, cuda.F32, p(0), p(8192), p(16384), p(24576), p(32768), 0, 8, 1e-6),
		"null a":       k.AddRMSNorm(nil, cuda.F32, cuda.F32, p(0), p(8192), 0, p(24576), p(32768), 1, 8, 1e-6),
		"out over sum": k.AddRMSNorm(nil, cuda.F32, cuda.F32, p(0), p(16), p(16384), p(24576), p(32768), 1, 8, 1e-6),
		"q8x n":        k.AddRMSNormQ8X(nil, cuda.F32, cuda.F32, p(0), p(8192), p(16384), p(24576), p(32768), p(40960), 1, 40, 1e-6),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// q8xWritten splits a rows x n q8x buffer into what its writers write: the
// int8 values (the first vals bytes) and the scales from byte scales to the
// end. The padding between them (to 256-byte alignment) is written by nobody,
// so tests that fill buffers differently must not compare it.
func q8xWritten(rows, n int) (vals, scales int64) {
	elems := int64(rows) * int64(n)
	return elems, lower.Q8XBytes(rows, n) - 16*(elems/32)
}
