package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/ir"
	"lagc/lower"
	"lagc/quant"
)

// randQuantBlocks returns the ggml blocks of a [rows, K] matrix of type t:
// random quants and scale bytes, and f16 super-scales small and finite.
func randQuantBlocks(r *rand.Rand, t quant.Type, rows, K int) []byte {
	nb := rows * K / t.BlockElems()
	bb := t.BlockBytes()
	b := make([]byte, nb*bb)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	put := func(p []byte, v float32) {
		h := quant.F32ToF16(v)
		p[0], p[1] = byte(h), byte(h>>8)
	}
	for i := 0; i < nb; i++ {
		blk := b[i*bb : (i+1)*bb]
		// Each type's d keeps the weights in q8_0's range (|w| < 2.8), as
		// in real files: a scale up to 127 (q8_0's quants, q6_k's int8
		// scales), 63 (the k-quants' 6-bit scales and mins) or 32 (iq4_xs's
		// ls - 32) times a quant up to 127 (iq4_xs's table), 32 (q6_k's q -
		// 32), 31 (q5_k) or 15 (q4_k). Larger, the routed experts' SwiGLU
		// outputs passed f16's 65504 and saturated on f16 operands (iq4_xs
		// first; q5_k and q6_k stacks, 2026-12-05, TestMoEQ6KGPU).
		d := func() float32 { return 0.002 + 0.02*r.Float32() }
		switch t {
		case quant.Q8_0:
			put(blk, d())
		case quant.IQ4_XS:
			put(blk, d()/32)
		case quant.Q4_K:
			put(blk, d()/8)
			put(blk[2:], d()/8)
		case quant.Q5_K:
			put(blk, d()/16)
			put(blk[2:], d()/16)
		case quant.Q6_K:
			put(blk[208:], d()/32)
		}
	}
	return b
}

func dequantRef(t *testing.T, qt quant.Type, blocks []byte, n int) []float32 {
	t.Helper()
	w := make([]float32, n)
	if err := quant.Dequantize(qt, w, blocks); err != nil {
		t.Fatalf("reference dequantisation of %s: %v", qt, err)
	}
	return w
}

// uploadQuant repacks blocks into the device layout and uploads them.
func uploadQuant(t *testing.T, k *Kernels, s *cuda.Stream, qt quant.Type, rows, K int, blocks []byte) cuda.DevicePtr {
	t.Helper()
	n, err := lower.QuantDeviceBytes(qt, rows, K)
	if err != nil {
		t.Fatal(err)
	}
	dev := make([]byte, n)
	if err := lower.RepackQuant(qt, rows, K, blocks, dev); err != nil {
		t.Fatal(err)
	}
	p := alloc(t, k, n)
	if err := s.CopyHtoD(p, dev); err != nil {
		t.Fatal(err)
	}
	return p
}

// q8xRef is what q8x_quantize makes of x: each value replaced by d*q.
func q8xRef(x []float32) []float32 {
	out := make([]float32, len(x))
	for g := 0; g+32 <= len(x); g += 32 {
		var amax float32
		for _, v := range x[g : g+32] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		for i, v := range x[g : g+32] {
			q := float32(0)
			if amax > 0 {
				q = float32(math.RoundToEven(float64(v / d)))
			}
			out[g+i] = d * q
		}
	}
	return out
}

// TestQDequantGPU: the device decoders of every type against the CPU
// reference dequantiser: qdequant's rows, and qembedding's (the matrix
// as an embedding table of 7 tokens; ids outside it give NaN rows).
func TestQDequantGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, qt := range lower.QuantKernelTypes {
		t.Run(qt.String(), func(t *testing.T) {
			rows, K := 7, 768
			blocks := randQuantBlocks(r, qt, rows, K)
			want := dequantRef(t, qt, blocks, rows*K)
			w := uploadQuant(t, k, s, qt, rows, K, blocks)
			out := alloc(t, k, int64(4*rows*K))
			if err := k.QDequant(s, qt, w, rows, K, 2, 5, out, cuda.F32); err != nil {
				t.Fatal(err)
			}
			got := download(t, s, cuda.F32, out, 5*K)
			checkClose(t, "rows 2..6", got, want[2*K:7*K], 1e-6)
			// bf16 (q8_0: eight values a thread): the f32 values rounded,
			// bit for bit.
			wantBF := roundTo(cuda.BF16, want[2*K:7*K])
			if err := k.QDequant(s, qt, w, rows, K, 2, 5, out, cuda.BF16); err != nil {
				t.Fatal(err)
			}
			gotBF := download(t, s, cuda.BF16, out, 5*K)
			for i := range gotBF {
				if gotBF[i] != wantBF[i] {
					t.Fatalf("bf16: value %d is %g, want %g", i, gotBF[i], wantBF[i])
				}
			}
			// qembedding, held as qdequant: f32 within 1e-6, bf16 bit for bit.
			ids := []int32{int32(rows - 1), 0, -1, 4, int32(rows), 4}
			emb := alloc(t, k, int64(4*len(ids)*K))
			for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
				if err := k.QEmbedding(s, qt, dt, emb, uploadI32(t, k, s, ids), w, len(ids), rows, K); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, dt, emb, len(ids)*K)
				for i, id := range ids {
					row := got[i*K : (i+1)*K]
					if id < 0 || id >= int32(rows) {
						if c := slices.IndexFunc(row, func(v float32) bool { return !math.IsNaN(float64(v)) }); c >= 0 {
							t.Fatalf("qembedding %v: token %d (outside the table), channel %d: %g, want NaN", dt, id, c, row[c])
						}
						continue
					}
					ref := want[int(id)*K : int(id+1)*K]
					if dt == cuda.F32 {
						checkClose(t, fmt.Sprintf("qembedding f32, token %d", id), row, ref, 1e-6)
					} else if !slices.Equal(row, roundTo(cuda.BF16, ref)) {
						t.Fatalf("qembedding bf16, token %d: not the reference rounded", id)
					}
				}
			}
		})
	}
}

// qgemvRef is y[r, n] = w[n] . q8x(x[r]) in float64 (SwiGLU: silu(gate) *
// up), plus y0 when accumulating, and the sum of |terms| per output (for
// the tolerance).
func qgemvRef(w, x, y0 []float32, T, K, N int, swiglu bool) (y, mag []float64) {
	y, mag = make([]float64, T*N), make([]float64, T*N)
	for r := 0; r < T; r++ {
		xe := q8xRef(x[r*K : (r+1)*K])
		for n := 0; n < N; n++ {
			dot := func(row int) (float64, float64) {
				var s, m float64
				for i := 0; i < K; i++ {
					p := float64(w[row*K+i]) * float64(xe[i])
					s += p
					m += math.Abs(p)
				}
				return s, m
			}
			v, m := dot(n)
			if swiglu {
				u, mu := dot(N + n)
				sig := 1 / (1 + math.Exp(-v))
				v, m = v*sig*u, m*math.Abs(u)+mu*math.Abs(v*sig)
			}
			if y0 != nil {
				v += float64(y0[r*N+n])
				m += math.Abs(float64(y0[r*N+n]))
			}
			y[r*N+n], mag[r*N+n] = v, m
		}
	}
	return y, mag
}

func checkQuantResult(t *testing.T, what string, got []float32, want, mag []float64, rel float64) {
	t.Helper()
	bad := 0
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= rel*mag[i]+1e-6) {
			if bad < 5 {
				t.Errorf("%s: [%d] = %g, want %g (tolerance %.3g)", what, i, got[i], want[i], rel*mag[i]+1e-6)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs off", what, bad, len(want))
	}
}

// qgemvCase is a quantised GEMV of the tests: T rows, the epilogues, y's
// dtype, and rows a warp / warps a row forced (0: lower's choice).
type qgemvCase struct {
	T, K, N     int
	swiglu, acc bool
	y           cuda.DType
	nw, split   int
}

// weights are random quantised weights of type qt for c, as blocks and
// dequantised: N rows (2N with SwiGLU) of K.
func (c qgemvCase) weights(t *testing.T, r *rand.Rand, qt quant.Type) (rows int, blocks []byte, w []float32) {
	t.Helper()
	rows = c.N
	if c.swiglu {
		rows *= 2
	}
	blocks = randQuantBlocks(r, qt, rows, c.K)
	return rows, blocks, dequantRef(t, qt, blocks, rows*c.K)
}

// checkRef checks the GEMV's output got against the CPU reference on
// the dequantised weights w and activations x (plus y0 when
// accumulating), within the output dtype's tolerance.
func (c qgemvCase) checkRef(t *testing.T, name string, got, w, x, y0 []float32) {
	t.Helper()
	want, mag := qgemvRef(w, x, y0, c.T, c.K, c.N, c.swiglu)
	rel := 1e-5
	if c.y == cuda.BF16 {
		rel = 8e-3
	}
	checkQuantResult(t, name, got, want, mag, rel)
}

// TestQGEMVGPU: the quantised GEMV of every type against the CPU reference
// on the same quantised activations, over row counts, ragged N, the
// SwiGLU and accumulate epilogues and both output dtypes.
func TestQGEMVGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(7, 8))
	cases := []qgemvCase{
		{T: 1, K: 3072, N: 37, y: cuda.F32},
		{T: 3, K: 1024, N: 64, y: cuda.F32, acc: true},
		{T: 8, K: 512, N: 9, y: cuda.F32, swiglu: true},
		{T: 2, K: 256, N: 40, y: cuda.BF16, swiglu: true, acc: true},
		{T: 1, K: 12288, N: 5, y: cuda.BF16},
		{T: 1, K: 9216, N: 131, y: cuda.F32, nw: 4, split: 8},
		{T: 2, K: 3072, N: 33, y: cuda.F32, swiglu: true, nw: 2, split: 4},
		{T: 5, K: 1024, N: 17, y: cuda.F32, nw: 1, split: 2},
	}
	for _, qt := range lower.QuantKernelTypes {
		for _, c := range cases {
			name := fmt.Sprintf("%s/T%d_K%d_N%d_sw%v_acc%v_%v_nw%d_split%d", qt, c.T, c.K, c.N, c.swiglu, c.acc, c.y, c.nw, c.split)
			t.Run(name, func(t *testing.T) {
				rows, blocks, w := c.weights(t, r, qt)
				x := randF32(r, c.T*c.K, 1)
				var y0 []float32
				a := QGEMVArgs{T: c.T, K: c.K, N: c.N, WType: qt, WRows: rows, YType: c.y, SwiGLU: c.swiglu, Accumulate: c.acc, RowsPerWarp: c.nw, Split: c.split}
				a.W = uploadQuant(t, k, s, qt, rows, c.K, blocks)
				xp := upload(t, k, s, cuda.F32, x)
				a.XQ = alloc(t, k, lower.Q8XBytes(c.T, c.K))
				if err := k.Q8XQuantize(s, cuda.F32, xp, a.XQ, c.T, c.K); err != nil {
					t.Fatal(err)
				}
				if c.acc {
					y0 = roundTo(c.y, randF32(r, c.T*c.N, 2))
					a.Y = upload(t, k, s, c.y, y0)
				} else {
					a.Y = alloc(t, k, int64(c.T*c.N*c.y.Size()))
				}
				if err := k.QGEMV(s, a); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, c.y, a.Y, c.T*c.N)
				c.checkRef(t, name, got, w, x, y0)
			})
		}
	}
}

// TestQGEMVXInGPU: the GEMV quantising its activations in the launch
// (qgemv_xin, the shared expert's down in decode) gives the bits of
// q8x_quantize then qgemv, for every type, both activation and output
// dtypes, row counts, forced shapes and both epilogues, and matches the
// CPU reference.
func TestQGEMVXInGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(27, 28))
	cases := []qgemvCase{
		{T: 1, K: 1024, N: 3072, y: cuda.BF16, acc: true}, // Laguna-S-2.1's shared down
		{T: 2, K: 1024, N: 64, y: cuda.F32, acc: true},
		{T: 1, K: 2048, N: 37, y: cuda.F32, nw: 4, split: 8},
		{T: 4, K: 512, N: 40, y: cuda.BF16, swiglu: true, acc: true},
		{T: 8, K: 256, N: 9, y: cuda.F32, swiglu: true, nw: 2, split: 2},
		{T: 1, K: 256, N: 131, y: cuda.BF16, nw: 4, split: 1},
		{T: 3, K: 96, N: 20, y: cuda.F32, acc: true}, // q8_0 only
	}
	for _, qt := range lower.QuantKernelTypes {
		for _, c := range cases {
			if c.K%qt.BlockElems() != 0 {
				continue
			}
			for _, xt := range []cuda.DType{cuda.BF16, cuda.F32} {
				name := fmt.Sprintf("%s/T%d_K%d_N%d_sw%v_acc%v_x%v_y%v_nw%d_split%d", qt, c.T, c.K, c.N, c.swiglu, c.acc, xt, c.y, c.nw, c.split)
				t.Run(name, func(t *testing.T) {
					rows, blocks, w := c.weights(t, r, qt)
					x := roundTo(xt, randF32(r, c.T*c.K, 1))
					a := QGEMVArgs{T: c.T, K: c.K, N: c.N, WType: qt, WRows: rows, YType: c.y, SwiGLU: c.swiglu, Accumulate: c.acc,
						RowsPerWarp: c.nw, Split: c.split}
					a.W = uploadQuant(t, k, s, qt, rows, c.K, blocks)
					xp := upload(t, k, s, xt, x)
					var y0 []float32
					newY := func() cuda.DevicePtr {
						if c.acc {
							return upload(t, k, s, c.y, y0)
						}
						p := alloc(t, k, int64(c.T*c.N*c.y.Size()))
						poison(t, s, p, int64(c.T*c.N*c.y.Size()))
						return p
					}
					if c.acc {
						y0 = roundTo(c.y, randF32(r, c.T*c.N, 2))
					}
					// q8x_quantize then qgemv
					ref := a
					ref.XQ, ref.Y = alloc(t, k, lower.Q8XBytes(c.T, c.K)), newY()
					if err := k.Q8XQuantize(s, xt, xp, ref.XQ, c.T, c.K); err != nil {
						t.Fatal(err)
					}
					if err := k.QGEMV(s, ref); err != nil {
						t.Fatal(err)
					}
					a.Y = newY()
					if err := k.QGEMVXIn(s, a, xp, xt); err != nil {
						t.Fatal(err)
					}
					got := download(t, s, c.y, a.Y, c.T*c.N)
					two := download(t, s, c.y, ref.Y, c.T*c.N)
					diff := 0
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(two[i]) {
							if diff < 5 {
								t.Errorf("y[%d] = %g (%#08x), q8x_quantize + qgemv %g (%#08x)", i, got[i], math.Float32bits(got[i]), two[i], math.Float32bits(two[i]))
							}
							diff++
						}
					}
					if diff > 0 {
						t.Errorf("%d of %d outputs differ from q8x_quantize + qgemv", diff, len(got))
					}
					c.checkRef(t, name, got, w, x, y0)
				})
			}
		}
	}
}

// TestQGEMVFXGPU: the float-activation GEMV (the variant the quantised-
// activation path is measured against) against the CPU reference on the
// dequantised weights, both activation and output dtypes.
func TestQGEMVFXGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(17, 18))
	cases := []struct{ T, K, N, rows int }{{1, 3072, 37, 40}, {3, 256, 64, 64}, {8, 1024, 9, 9}, {2, 9216, 33, 33}}
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		for _, c := range cases {
			for _, xt := range []cuda.DType{cuda.F32, cuda.BF16} {
				for _, yt := range []cuda.DType{cuda.F32, cuda.BF16} {
					name := fmt.Sprintf("%s/T%d_K%d_N%d/x%v_y%v", qt, c.T, c.K, c.N, xt, yt)
					t.Run(name, func(t *testing.T) {
						blocks := randQuantBlocks(r, qt, c.rows, c.K)
						w := dequantRef(t, qt, blocks, c.rows*c.K)
						x := roundTo(xt, randF32(r, c.T*c.K, 1))
						wp := uploadQuant(t, k, s, qt, c.rows, c.K, blocks)
						xp := upload(t, k, s, xt, x)
						yp := alloc(t, k, int64(c.T*c.N*yt.Size()))
						if err := k.QGEMVFX(s, qt, c.T, c.K, c.N, c.rows, xp, wp, yp, xt, yt); err != nil {
							t.Fatal(err)
						}
						got := download(t, s, yt, yp, c.T*c.N)
						want, mag := make([]float64, c.T*c.N), make([]float64, c.T*c.N)
						for i := 0; i < c.T; i++ {
							for n := 0; n < c.N; n++ {
								for j := 0; j < c.K; j++ {
									p := float64(w[n*c.K+j]) * float64(x[i*c.K+j])
									want[i*c.N+n] += p
									mag[i*c.N+n] += math.Abs(p)
								}
							}
						}
						rel := 3e-5
						if yt == cuda.BF16 {
							rel = 8e-3
						}
						checkQuantResult(t, name, got, want, mag, rel)
					})
				}
			}
		}
	}
}

// TestQMoEGPU: the quantised routed experts against the CPU reference
// (with the activations quantised as the kernels do), invalid ids
// included, at a shape where a lane holds one unit of a row and at one
// where it holds several (the S-2.1 and XS-2 kernels' case): every type,
// and downs of another type than their gate and up, as llama.cpp's
// Q4_K_M mixture stores them (q6_k downs of q4_k experts).
func TestQMoEGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(9, 10))
	var pairs [][2]quant.Type
	for _, qt := range lower.QuantKernelTypes {
		pairs = append(pairs, [2]quant.Type{qt, qt})
	}
	pairs = append(pairs, [2]quant.Type{quant.Q4_K, quant.Q6_K}, [2]quant.Type{quant.Q5_K, quant.Q6_K}, [2]quant.Type{quant.IQ4_XS, quant.Q8_0})
	for _, pair := range pairs {
		qt, dt := pair[0], pair[1]
		name := qt.String()
		if dt != qt {
			name += "+" + dt.String()
		}
		for _, c := range []struct{ T, E, H, I, topK int }{{1, 5, 512, 256, 3}, {3, 5, 512, 256, 3}, {3, 6, 2048, 512, 4}} {
			T := c.T
			t.Run(fmt.Sprintf("%s/T%d_H%d_I%d", name, T, c.H, c.I), func(t *testing.T) {
				E, H, I, topK := c.E, c.H, c.I, c.topK
				gb := randQuantBlocks(r, qt, E*I, H)
				ub := randQuantBlocks(r, qt, E*I, H)
				db := randQuantBlocks(r, dt, E*H, I)
				gw, uw, dw := dequantRef(t, qt, gb, E*I*H), dequantRef(t, qt, ub, E*I*H), dequantRef(t, dt, db, E*H*I)
				x := randF32(r, T*H, 1)
				ids := make([]int32, T*topK)
				wts := make([]float32, T*topK)
				for i := range ids {
					ids[i] = int32(r.IntN(E))
					wts[i] = r.Float32()
				}
				ids[len(ids)-1] = int32(E) // out of range: contributes nothing
				a := QMoEArgs{T: T, H: H, I: I, E: E, TopK: topK, WType: qt, DownType: dt, OutType: cuda.F32, XType: cuda.F32}
				a.Gate = QMatrix{W: uploadQuant(t, k, s, qt, E*I, H, gb), Total: E * I}
				a.Up = QMatrix{W: uploadQuant(t, k, s, qt, E*I, H, ub), Total: E * I}
				a.Down = QMatrix{W: uploadQuant(t, k, s, dt, E*H, I, db), Total: E * H}
				a.X = upload(t, k, s, cuda.F32, x)
				a.IDs = uploadI32(t, k, s, ids)
				a.Weights = upload(t, k, s, cuda.F32, wts)
				a.Out = alloc(t, k, int64(4*T*H))
				a.Workspace = alloc(t, k, QMoEWorkspaceBytes(a))
				if err := k.QMoE(s, a); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, cuda.F32, a.Out, T*H)
				want := make([]float64, T*H)
				mag := make([]float64, T*H)
				for tok := 0; tok < T; tok++ {
					xe := q8xRef(x[tok*H : (tok+1)*H])
					for j := 0; j < topK; j++ {
						e := int(ids[tok*topK+j])
						if e < 0 || e >= E {
							continue
						}
						act := make([]float32, I)
						for i := 0; i < I; i++ {
							var g, u float64
							for h := 0; h < H; h++ {
								g += float64(gw[(e*I+i)*H+h]) * float64(xe[h])
								u += float64(uw[(e*I+i)*H+h]) * float64(xe[h])
							}
							act[i] = float32(g / (1 + math.Exp(-g)) * u)
						}
						ae := q8xRef(act)
						for h := 0; h < H; h++ {
							var d, m float64
							for i := 0; i < I; i++ {
								p := float64(dw[(e*H+h)*I+i]) * float64(ae[i])
								d += p
								m += math.Abs(p)
							}
							want[tok*H+h] += float64(wts[tok*topK+j]) * d
							mag[tok*H+h] += float64(wts[tok*topK+j]) * m
						}
					}
				}
				// The activations are re-quantised from the GPU's own f32
				// values: a rounding tie may land one step apart.
				checkQuantResult(t, "moe", got, want, mag, 2e-3)
			})
		}
	}
}

// qmoeBitsShapes are the forced shapes TestQMoEBatchBitsGPU compares with
// lower's choice: gate+up rows a round, warps; down rows a warp, units a
// round, warps; gate+up stages; down's units all at once (1).
var qmoeBitsShapes = [][7]int{{2, 4, 1, 2, 4, 0, 0}, {4, 4, 4, 8, 4, 0, 0}, {16, 4, 2, 4, 4, 0, 0}, {8, 8, 1, 8, 8, 0, 0},
	{2, 8, 4, 4, 8, 0, 0}, {8, 4, 2, 8, 4, 2, 0}, {4, 4, 2, 8, 4, 3, 1}, {2, 8, 2, 8, 4, 4, 0}, {4, 8, 2, 8, 8, 2, 1},
	{0, 0, 1, 2, 8, 0, 1}, {0, 0, 4, 2, 4, 0, 1}, {4, 8, 2, 8, 4, 1, 0}, {2, 8, 2, 8, 4, 1, 0}, {8, 4, 2, 8, 4, 1, 0},
	{0, 0, 2, 10, 4, 0, 0}, {0, 0, 1, 10, 8, 0, 0}}

// TestQMoEBatchBitsGPU: a token's routed-expert output has the same bits
// whatever the number of tokens in the launch and whatever rounds the
// kernels take (batched decode compares batches bitwise).
func TestQMoEBatchBitsGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(13, 14))
	const E, H, I, topK, maxT = 12, 1024, 512, 4, lower.QGEMVMaxRows
	for _, qt := range lower.QuantKernelTypes {
		t.Run(qt.String(), func(t *testing.T) {
			gu := uploadQuant(t, k, s, qt, 2*E*I, H, randQuantBlocks(r, qt, 2*E*I, H))
			dw := uploadQuant(t, k, s, qt, E*H, I, randQuantBlocks(r, qt, E*H, I))
			ids := make([]int32, maxT*topK)
			wts := make([]float32, len(ids))
			for i := range ids {
				ids[i] = int32(r.IntN(E))
				wts[i] = r.Float32()
			}
			ids[5] = -1 // invalid: skipped
			x := upload(t, k, s, cuda.BF16, randF32(r, maxT*H, 1))
			idp, wtp := uploadI32(t, k, s, ids), upload(t, k, s, cuda.F32, wts)
			// run: the routed experts of T tokens with rounds rd.
			run := func(T int, rd [7]int) []float32 {
				a := QMoEArgs{T: T, H: H, I: I, E: E, TopK: topK, WType: qt, XType: cuda.BF16, OutType: cuda.BF16,
					X: x, IDs: idp, Weights: wtp, Gate: QMatrix{W: gu, Total: 2 * E * I}, Up: QMatrix{W: gu, Total: 2 * E * I, Row0: E * I},
					Down: QMatrix{W: dw, Total: E * H},
					QMoEForce: lower.QMoEForce{GateUpRows: rd[0], GateUpWarps: rd[1], DownRows: rd[2], DownUnits: rd[3], DownWarps: rd[4],
						GateUpStages: rd[5], DownAll: rd[6] == 1}}
				a.Out = alloc(t, k, int64(2*T*H))
				a.Workspace = alloc(t, k, QMoEWorkspaceBytes(a))
				if err := k.QMoE(s, a); err != nil {
					t.Fatal(err)
				}
				return download(t, s, cuda.BF16, a.Out, T*H)
			}
			want := run(maxT, [7]int{})
			same := func(what string, got []float32) {
				t.Helper()
				for i, v := range got {
					if math.Float32bits(v) != math.Float32bits(want[i]) {
						t.Errorf("%s: output %d (token %d) is %g, %g with %d tokens and the chosen rounds", what, i, i/H, v, want[i], maxT)
						return
					}
				}
			}
			for _, T := range []int{1, 2, 5} {
				same(fmt.Sprintf("T=%d", T), run(T, [7]int{}))
			}
			// gate+up rows and warps, down rows, units and warps, gate+up
			// stages in shared memory, down's units all at once
			for _, rd := range qmoeBitsShapes {
				same(fmt.Sprintf("rounds %v", rd), run(maxT, rd))
				same(fmt.Sprintf("rounds %v, one token", rd), run(1, rd)[:H])
			}
		})
	}
}

// BenchmarkQGEMV: quantised decode GEMVs at Laguna-S-2.1 shapes (T = 1),
// GB/s of weights read (the roofline is the HBM bandwidth).
func BenchmarkQGEMV(b *testing.B) {
	m := newMMBench(b)
	sh := s21(b)
	for _, qt := range lower.QuantKernelTypes {
		for _, c := range []benchShape{sh.lmHead, sh.qkvg, sh.oProj, sh.sharedGateUp, sh.sharedDown} {
			for _, sh := range [][2]int{{0, 0}} {
				if (qt != quant.Q8_0 && qt != quant.Q4_K) && sh[0] != 0 {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/nw%d_split%d", qt, c.name, sh[0], sh[1]), func(b *testing.B) {
					rows := c.N
					if c.swiglu {
						rows *= 2
					}
					wb, err := lower.QuantDeviceBytes(qt, rows, c.K)
					if err != nil {
						b.Fatal(err)
					}
					// Random bytes: scales may be anything, speed does not care.
					a := QGEMVArgs{T: 1, K: c.K, N: c.N, WType: qt, WRows: rows, YType: cuda.BF16, SwiGLU: c.swiglu, RowsPerWarp: sh[0], Split: sh[1],
						W: m.rand(int(wb / 2)), XQ: m.rand(int(lower.Q8XBytes(1, c.K) / 2)), Y: m.rand(c.N)}
					m.run(b, float64(wb), 2*float64(rows*c.K), func() error { return m.k.QGEMV(m.s, a) })
				})
			}
		}
	}
}

// BenchmarkQGEMVShapes: the decode GEMVs (T = 1) of S-2.1's q4_k_m
// (attention and shared expert in q8_0) in every shape qgemv takes (nw
// rows a warp group, split warps a group; nw0_split0 is lower's choice),
// each iteration on the next of enough copies of the matrix to pass the
// H200's 50 MiB L2, so the weights come from HBM as in a decode step;
// l2 is lower's choice on one copy, which stays in L2: how far a GEMV's
// time is its HBM traffic and how far its own latency.
func BenchmarkQGEMVShapes(b *testing.B) {
	m := newMMBench(b)
	sh := s21(b)
	qt := quant.Q8_0
	for _, c := range []benchShape{sh.qkvg, sh.oProj, sh.sharedDown} {
		wb, err := lower.QuantDeviceBytes(qt, c.N, c.K)
		if err != nil {
			b.Fatal(err)
		}
		copies := int(max(2, (160<<20)/wb+1))
		ws := make([]cuda.DevicePtr, copies)
		for i := range ws {
			ws[i] = m.rand(int(wb / 2))
		}
		xq, y := m.rand(int(lower.Q8XBytes(1, c.K)/2)), m.rand(c.N)
		shapes := [][2]int{{0, 0}}
		for _, nw := range []int{1, 2, 4} {
			for _, split := range []int{1, 2, 4, 8} {
				shapes = append(shapes, [2]int{nw, split})
			}
		}
		b.Run(fmt.Sprintf("%s/%s/l2", qt, c.name), func(b *testing.B) {
			m.run(b, float64(wb), 2*float64(c.N*c.K), func() error {
				return m.k.QGEMV(m.s, QGEMVArgs{T: 1, K: c.K, N: c.N, WType: qt, WRows: c.N, YType: cuda.BF16, W: ws[0], XQ: xq, Y: y})
			})
		})
		for _, sp := range shapes {
			b.Run(fmt.Sprintf("%s/%s/nw%d_split%d", qt, c.name, sp[0], sp[1]), func(b *testing.B) {
				i := 0
				m.run(b, float64(wb), 2*float64(c.N*c.K), func() error {
					a := QGEMVArgs{T: 1, K: c.K, N: c.N, WType: qt, WRows: c.N, YType: cuda.BF16, RowsPerWarp: sp[0], Split: sp[1],
						W: ws[i%copies], XQ: xq, Y: y}
					i++
					return m.k.QGEMV(m.s, a)
				})
			})
		}
	}
}

// BenchmarkQGEMVFloatX: decode GEMVs (T = 1) at S-2.1 shapes with the
// activations quantised to int8 first (q8x: q8x_quantize + qgemv on dp4a,
// what lower plans) and read as bf16 (fx: qgemv_fx).
func BenchmarkQGEMVFloatX(b *testing.B) {
	m := newMMBench(b)
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		sh := s21(b)
		gu := benchShape{sh.sharedGateUp.name, 2 * sh.sharedGateUp.N, sh.sharedGateUp.K, false} // its gate and up rows as one matrix
		for _, c := range []benchShape{sh.qkvg, sh.oProj, gu, sh.sharedDown} {
			wb, err := lower.QuantDeviceBytes(qt, c.N, c.K)
			if err != nil {
				b.Fatal(err)
			}
			w := m.rand(int(wb / 2))
			if err := m.k.QSynth(m.s, qt, w, c.N, c.K, 1); err != nil {
				b.Fatal(err)
			}
			x, y := m.rand(c.K), m.rand(c.N)
			xq := m.rand(int(lower.Q8XBytes(1, c.K) / 2))
			b.Run(fmt.Sprintf("%s/%s/q8x", qt, c.name), func(b *testing.B) {
				a := QGEMVArgs{T: 1, K: c.K, N: c.N, WType: qt, WRows: c.N, YType: cuda.BF16, W: w, XQ: xq, Y: y}
				m.run(b, float64(wb), 2*float64(c.N*c.K), func() error {
					if err := m.k.Q8XQuantize(m.s, cuda.BF16, x, xq, 1, c.K); err != nil {
						return err
					}
					return m.k.QGEMV(m.s, a)
				})
			})
			b.Run(fmt.Sprintf("%s/%s/fx", qt, c.name), func(b *testing.B) {
				m.run(b, float64(wb), 2*float64(c.N*c.K), func() error {
					return m.k.QGEMVFX(m.s, qt, 1, c.K, c.N, c.N, x, w, y, cuda.BF16, cuda.BF16)
				})
			})
		}
	}
}

// qmoeBench is a BenchmarkQMoE case: a weight type and a forced shape.
type qmoeBench struct {
	qt                    quant.Type
	g, gw, nh, sd, dw, ns int // zero: lower's choice
	all                   bool
}

// qmoeBenchCases are BenchmarkQMoE's cases: every type as lower chooses,
// then q4_k's shapes.
func qmoeBenchCases() []qmoeBench {
	var cases []qmoeBench
	for _, qt := range lower.QuantKernelTypes {
		cases = append(cases, qmoeBench{qt: qt})
	}
	// gate+up rows, warps and stages; down rows, units and warps
	for _, c := range [][6]int{{4, 8, 0, 0, 0, 0}, {16, 0, 0, 0, 0, 2}, {8, 0, 0, 0, 0, 2}, {8, 0, 0, 0, 0, 3},
		{4, 0, 0, 0, 0, 3}, {4, 0, 0, 0, 0, 4}, {2, 0, 0, 0, 0, 4}, {4, 8, 0, 0, 0, 3}, {0, 0, 2, 4, 0, 0}, {0, 0, 4, 4, 0, 0}} {
		cases = append(cases, qmoeBench{quant.Q4_K, c[0], c[1], c[2], c[3], c[4], c[5], false})
	}
	// down's units all at once (2 or 1 rows a warp, 4 or 8 warps), alone
	// and with gate+up's 3-stage ring (with 4 rows a warp, 8 warps of 2,
	// or q8_0, the copies pass the 96 KiB QMoE allows: lower refuses them)
	cases = append(cases, qmoeBench{qt: quant.Q4_K, all: true}, qmoeBench{qt: quant.Q4_K, nh: 1, dw: 8, all: true},
		qmoeBench{qt: quant.Q4_K, g: 8, ns: 3, all: true})
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q6_K, quant.IQ4_XS} {
		cases = append(cases, qmoeBench{qt: qt, g: 4, ns: 3})
	}
	return cases
}

// TestQMoEShapesLower: every shape TestQMoEBatchBitsGPU and BenchmarkQMoE
// force is one lower takes (without a GPU: a shape it refuses would fail
// there, on the device's time).
func TestQMoEShapesLower(t *testing.T) {
	p := lower.DevicePtr(256)
	args := func(qt quant.Type, T, E, H, I, k int) lower.QMoEArgs {
		return lower.QMoEArgs{T: T, H: H, I: I, E: E, TopK: k, X: p, XType: "bf16", Weights: p, IDs: p,
			Gate: lower.QMatrix{W: p, Total: 2 * E * I}, Up: lower.QMatrix{W: p, Total: 2 * E * I, Row0: E * I},
			Down: lower.QMatrix{W: p, Total: E * H}, WType: qt, Out: p, OutType: "bf16", Workspace: p}
	}
	for _, qt := range lower.QuantKernelTypes {
		for _, rd := range qmoeBitsShapes {
			a := args(qt, lower.QGEMVMaxRows, 12, 1024, 512, 4)
			a.GateUpRows, a.GateUpWarps, a.DownRows, a.DownUnits, a.DownWarps, a.GateUpStages, a.DownAll = rd[0], rd[1], rd[2], rd[3], rd[4], rd[5], rd[6] == 1
			if _, err := lower.QMoE(a); err != nil {
				t.Errorf("%s %v: %v", qt, rd, err)
			}
		}
	}
	for _, c := range qmoeBenchCases() {
		a := args(c.qt, 1, 256, 3072, 1024, 10)
		a.GateUpRows, a.GateUpWarps, a.DownRows, a.DownUnits, a.DownWarps, a.GateUpStages, a.DownAll = c.g, c.gw, c.nh, c.sd, c.dw, c.ns, c.all
		if _, err := lower.QMoE(a); err != nil {
			t.Errorf("bench %+v: %v", c, err)
		}
	}
}

// BenchmarkQMoE: the routed experts of one decode token (top-10 of 256,
// H 3072, I 1024, gate and up one matrix); GB/s of the ten experts'
// weights. Each type with the rounds lower chooses, and a few other rounds
// for q4_k and iq4_xs (gN: gate+up rows in flight per lane; dNxM: down
// rows per warp x units in flight per row).
func BenchmarkQMoE(b *testing.B) {
	m := newMMBench(b)
	r := rand.New(rand.NewPCG(3, 4))
	const E, K, H, I = 256, 10, 3072, 1024
	// hbm: each iteration routes to another of sets choices of K experts,
	// so that the weights come from HBM, not from L2 (50 MB on an H200);
	// l2: the same K experts every iteration.
	const sets = 16
	cases := qmoeBenchCases()
	for _, c := range cases {
		qt := c.qt
		name := qt.String()
		if c.g != 0 || c.gw != 0 || c.ns != 0 {
			name += fmt.Sprintf("-g%dw%ds%d", c.g, c.gw, c.ns)
		}
		if c.nh != 0 || c.dw != 0 {
			name += fmt.Sprintf("-d%dx%dw%d", c.nh, c.sd, c.dw)
		}
		if c.all {
			name += "-dall"
		}
		b.Run(name, func(b *testing.B) {
			a, idp, wtp, bytes := m.routedExperts(r, qt, 0, E, K, H, I, sets, lower.QMoEForce{GateUpRows: c.g, GateUpWarps: c.gw,
				DownRows: c.nh, DownUnits: c.sd, DownWarps: c.dw, GateUpStages: c.ns, DownAll: c.all})
			for _, l2 := range []bool{false, true} {
				// l2: the same experts every iteration, their weights
				// staying in L2 (how far the time is HBM traffic).
				name := "hbm"
				if l2 {
					name = "l2"
				}
				b.Run(name, func(b *testing.B) {
					i := 0
					m.run(b, bytes, 2*float64(K)*3*I*H, func() error {
						set := i % sets
						if l2 {
							set = 0
						}
						a.IDs, a.Weights = idp.Add(int64(4*K*set)), wtp.Add(int64(4*K*set))
						i++
						return m.k.QMoE(m.s, a)
					})
				})
			}
		})
	}
}

// TestQMoEShapeEnv: LAGC_QMOE_SHAPE reaches the plan's decode routed-expert
// launches (and the dry-run executor binds them); a bad value is an error
// that names the variable.
func TestQMoEShapeEnv(t *testing.T) {
	t.Setenv("LAGC_QMOE_SHAPE", "g=8,s=3,nh=1,dw=8,all")
	o, err := PlanOptions(Config{DType: ir.BF16}, 132, 90)
	if err != nil {
		t.Fatal(err)
	}
	want := lower.QMoEForce{GateUpRows: 8, GateUpStages: 3, DownRows: 1, DownWarps: 8, DownAll: true}
	if o.QMoE != want {
		t.Fatalf("options %+v, want %+v", o.QMoE, want)
	}
	var m traceModel
	for _, tm := range traceModels {
		if tm.name == "laguna-s-2.1-q4_k_m" {
			m = tm
		}
	}
	m.qmoe = o.QMoE
	p := tracePlan(t, m, ir.BF16)
	var gu, dn int
	for _, st := range p.Decode.Steps {
		for _, l := range st.Launches {
			switch l.Kernel {
			case "moe_gateup_qgemv":
				gu++
				if !slices.Equal(l.Ints, []int64{int64(quant.Q4_K), 8, 4, 3}) {
					t.Errorf("gate+up instantiated with %v", l.Ints)
				}
			case "moe_down_qgemv", "moe_down_qgemv_trig": // _trig: fuseXInPre's (ALL 1 keeps fuseDownPre off)
				dn++
				_, _, _, _, sd := lower.QMoEShape(quant.Q4_K) // not forced: the type's (unused with all)
				if !slices.Equal(l.Ints, []int64{int64(quant.Q4_K), 1, int64(sd), 8, 1}) || l.Block[0] != 256 {
					t.Errorf("down instantiated with %v, block %v", l.Ints, l.Block)
				}
			}
		}
	}
	if gu == 0 || gu != dn {
		t.Fatalf("%d gate+up and %d down launches in the decode plan", gu, dn)
	}
	ex, _, err := DryRun(p)
	if err != nil {
		t.Fatal(err)
	}
	ex.Close()
	t.Setenv("LAGC_QMOE_SHAPE", "g=eight")
	if _, err := PlanOptions(Config{DType: ir.BF16}, 132, 90); err == nil || !strings.Contains(err.Error(), "LAGC_QMOE_SHAPE") {
		t.Fatalf("a bad LAGC_QMOE_SHAPE gave %v", err)
	}
}

// TestQSynthMeanGPU: synthetic weights of every type average about zero
// (at most 7% of their mean magnitude; q8_0 and the codebook types sit
// half a step low by their formats). A common offset in every weight had
// sent all tokens of a synthetic q4_k model to the same experts.
func TestQSynthMeanGPU(t *testing.T) {
	k, s := gpu(t)
	const rows, K = 64, 3072
	for _, qt := range lower.QuantKernelTypes {
		t.Run(qt.String(), func(t *testing.T) {
			n, err := lower.QuantDeviceBytes(qt, rows, K)
			if err != nil {
				t.Fatal(err)
			}
			w := alloc(t, k, n)
			if err := k.QSynth(s, qt, w, rows, K, 3); err != nil {
				t.Fatal(err)
			}
			out := alloc(t, k, int64(4*rows*K))
			if err := k.QDequant(s, qt, w, rows, K, 0, rows, out, cuda.F32); err != nil {
				t.Fatal(err)
			}
			var sum, sumAbs float64
			for _, v := range download(t, s, cuda.F32, out, rows*K) {
				sum += float64(v)
				sumAbs += math.Abs(float64(v))
			}
			if mean, mag := sum/(rows*K), sumAbs/(rows*K); mag == 0 || math.Abs(mean) > 0.07*mag {
				t.Errorf("values average %.3g at a mean magnitude of %.3g", mean, mag)
			}
		})
	}
}

// routedExperts is one token's routed experts on random weights (gate and
// up in one stack of type qt, the down of dt, zero: qt), with sets routings
// to K of E experts at idp and wtp (ids and weights, K apiece), and the
// bytes of weights one token reads.
func (m *mmBench) routedExperts(r *rand.Rand, qt, dt quant.Type, E, K, H, I, sets int, force lower.QMoEForce) (a QMoEArgs, idp, wtp cuda.DevicePtr, bytes float64) {
	if dt == 0 {
		dt = qt
	}
	gb, err := lower.QuantDeviceBytes(qt, 2*E*I, H)
	if err != nil {
		m.b.Fatal(err)
	}
	db, err := lower.QuantDeviceBytes(dt, E*H, I)
	if err != nil {
		m.b.Fatal(err)
	}
	ids, wts := routeSets(r, E, K, sets)
	gu := m.rand(int(gb / 2))
	a = QMoEArgs{T: 1, H: H, I: I, E: E, TopK: K, WType: qt, OutType: cuda.BF16, XType: cuda.BF16,
		Gate: QMatrix{W: gu, Total: 2 * E * I}, Up: QMatrix{W: gu, Total: 2 * E * I, Row0: E * I},
		DownType: dt, Down: QMatrix{W: m.rand(int(db / 2)), Total: E * H}, X: m.rand(H), Out: m.rand(H), QMoEForce: force}
	a.Workspace = m.rand(int(QMoEWorkspaceBytes(a) / 2))
	return a, m.upload(cuda.AsBytes(ids)), m.upload(cuda.AsBytes(wts)), float64(K) * float64(gb+db) / float64(E)
}

// routeSets is sets routings of one token to k distinct experts of E,
// each route weighing 0.1: ids and weights [sets*k].
func routeSets(r *rand.Rand, E, k, sets int) ([]int32, []float32) {
	ids := make([]int32, sets*k)
	wts := make([]float32, sets*k)
	for s := range sets {
		for j, e := range r.Perm(E)[:k] {
			ids[s*k+j], wts[s*k+j] = int32(e), 0.1
		}
	}
	return ids, wts
}
