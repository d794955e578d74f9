package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// refAttention computes causal (optionally sliding) GQA attention in float64
// over whole sequences q [P,nh,d], k, v [P,nkv,d] at positions 0..P-1.
func refAttention(q, k, v []float32, P, nh, nkv, d, window int, scale float64) []float64 {
	out := make([]float64, P*nh*d)
	group := nh / nkv
	for i := 0; i < P; i++ {
		for h := 0; h < nh; h++ {
			kvh := h / group
			lo := 0
			if window > 0 {
				lo = max(0, i-window+1)
			}
			s := make([]float64, i-lo+1)
			m := math.Inf(-1)
			for j := lo; j <= i; j++ {
				acc := 0.0
				for c := 0; c < d; c++ {
					acc += float64(q[(i*nh+h)*d+c]) * float64(k[(j*nkv+kvh)*d+c])
				}
				s[j-lo] = acc * scale
				m = math.Max(m, s[j-lo])
			}
			sum := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			for j := lo; j <= i; j++ {
				p := s[j-lo] / sum
				for c := 0; c < d; c++ {
					out[(i*nh+h)*d+c] += p * float64(v[(j*nkv+kvh)*d+c])
				}
			}
		}
	}
	return out
}

// runChunks feeds positions 0..P-1 to Attention in chunks of the given
// sizes (the last size repeats) and returns the outputs [P,nh,d].
func runChunks(t *testing.T, cache *KVCache, q, k, v []float32, P, nh, nkv, d, window int, chunks []int) []float32 {
	t.Helper()
	out := make([]float32, P*nh*d)
	scale := float32(1 / math.Sqrt(float64(d)))
	for p0, c := 0, 0; p0 < P; c++ {
		n := chunks[min(c, len(chunks)-1)]
		n = min(n, P-p0)
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(p0 + i)
		}
		qs, ks := q[p0*nh*d:(p0+n)*nh*d], k[p0*nkv*d:(p0+n)*nkv*d]
		if err := Attention(out[p0*nh*d:(p0+n)*nh*d], qs, ks, v[p0*nkv*d:(p0+n)*nkv*d], pos, n, nh, nkv, d, window, scale, cache); err != nil {
			t.Fatalf("chunk at %d: %v", p0, err)
		}
		p0 += n
	}
	return out
}

func TestAttention(t *testing.T) {
	for _, tc := range []struct {
		P, nh, nkv, d, window int
	}{
		{1, 1, 1, 4, 0},
		{13, 4, 4, 8, 0},  // groups of 1
		{13, 4, 2, 8, 0},  // groups of 2
		{13, 8, 2, 9, 0},  // groups of 4, d not a multiple of 8
		{13, 4, 2, 8, 5},  // window shorter than the sequence
		{13, 4, 1, 8, 20}, // window longer than the sequence
		{50, 2, 1, 4, 3},  // the ring wraps around 16 times
		{9, 6, 3, 16, 1},  // window 1: each token sees only itself
		{40, 8, 2, 33, 7}, // big enough to run in parallel
	} {
		name := fmt.Sprintf("P%d_nh%d_nkv%d_d%d_w%d", tc.P, tc.nh, tc.nkv, tc.d, tc.window)
		t.Run(name, func(t *testing.T) {
			q := randSlice(31, tc.P*tc.nh*tc.d, 1.5)
			k := randSlice(32, tc.P*tc.nkv*tc.d, 1.5)
			v := randSlice(33, tc.P*tc.nkv*tc.d, 1)
			newCache := func() *KVCache {
				c, err := NewKVCache(tc.nkv, tc.d, tc.window, tc.P)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			whole := runChunks(t, newCache(), q, k, v, tc.P, tc.nh, tc.nkv, tc.d, tc.window, []int{tc.P})
			ref := refAttention(q, k, v, tc.P, tc.nh, tc.nkv, tc.d, tc.window, 1/math.Sqrt(float64(tc.d)))
			if diff := maxAbsDiff(whole, ref); diff > 2e-6 {
				t.Fatalf("max |diff| from float64 reference = %g", diff)
			}
			// Token by token, and in uneven chunks (some longer than the window), bitwise equal.
			for _, chunks := range [][]int{{1}, {3, 7, 1, 2}, {tc.P - 1, 1}} {
				if chunks[0] <= 0 {
					continue
				}
				got := runChunks(t, newCache(), q, k, v, tc.P, tc.nh, tc.nkv, tc.d, tc.window, chunks)
				requireBitwise(t, fmt.Sprintf("chunks %v vs one call", chunks), got, whole)
			}
			withThreads(1, func() {
				got := runChunks(t, newCache(), q, k, v, tc.P, tc.nh, tc.nkv, tc.d, tc.window, []int{tc.P})
				requireBitwise(t, "one thread", got, whole)
			})
			// The cache is full: one more position is past the context.
			c := newCache()
			runChunks(t, c, q, k, v, tc.P, tc.nh, tc.nkv, tc.d, tc.window, []int{tc.P})
			err := Attention(make([]float32, tc.nh*tc.d), q[:tc.nh*tc.d], k[:tc.nkv*tc.d], v[:tc.nkv*tc.d],
				[]int32{int32(tc.P)}, 1, tc.nh, tc.nkv, tc.d, tc.window, 1, c)
			if err == nil || !strings.Contains(err.Error(), "beyond the context length") {
				t.Fatalf("position %d in a context of %d: error %v", tc.P, tc.P, err)
			}
		})
	}
}

// TestAttentionRewrite re-runs the tail of a sequence with new keys and
// values: a linear cache may go back anywhere, a ring one position.
func TestAttentionRewrite(t *testing.T) {
	const P, nh, nkv, d = 10, 4, 2, 8
	for _, tc := range []struct {
		window, from int
	}{{0, 6}, {0, 0}, {0, 9}, {3, 9}, {4, 10}} {
		q := randSlice(41, P*nh*d, 1.5)
		k := randSlice(42, P*nkv*d, 1.5)
		v := randSlice(43, P*nkv*d, 1)
		c, _ := NewKVCache(nkv, d, tc.window, 64)
		runChunks(t, c, q, k, v, P, nh, nkv, d, tc.window, []int{1})
		k2 := append([]float32(nil), k...)
		v2 := append([]float32(nil), v...)
		copy(k2[tc.from*nkv*d:], randSlice(44, (P-tc.from)*nkv*d, 1.5))
		copy(v2[tc.from*nkv*d:], randSlice(45, (P-tc.from)*nkv*d, 1))
		n := P - tc.from
		out := make([]float32, n*nh*d)
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(tc.from + i)
		}
		if n > 0 {
			if err := Attention(out, q[tc.from*nh*d:], k2[tc.from*nkv*d:], v2[tc.from*nkv*d:], pos, n, nh, nkv, d, tc.window,
				float32(1/math.Sqrt(d)), c); err != nil {
				t.Fatalf("%+v: %v", tc, err)
			}
		}
		ref := refAttention(q, k2, v2, P, nh, nkv, d, tc.window, 1/math.Sqrt(d))
		if diff := maxAbsDiff(out, ref[tc.from*nh*d:]); diff > 2e-6 {
			t.Errorf("%+v: max |diff| = %g", tc, diff)
		}
		if c.Len() != P {
			t.Errorf("%+v: Len = %d after rewriting, want %d", tc, c.Len(), P)
		}
	}
}

func TestAttentionErrors(t *testing.T) {
	const nh, nkv, d = 4, 2, 4
	q := make([]float32, 2*nh*d)
	kv := make([]float32, 2*nkv*d)
	out := make([]float32, 2*nh*d)
	filled := func(window, n int) *KVCache {
		c, _ := NewKVCache(nkv, d, window, 100)
		for p := 0; p < n; p++ {
			if err := Attention(out[:nh*d], q[:nh*d], kv[:nkv*d], kv[:nkv*d], []int32{int32(p)}, 1, nh, nkv, d, window, 1, c); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		pos    []int32
		nh     int
		window int
		cache  *KVCache
		want   string
	}{
		{"gap", []int32{6, 7}, nh, 0, filled(0, 5), "gap"},
		{"not consecutive", []int32{5, 7}, nh, 0, filled(0, 5), "consecutive"},
		{"ring back two", []int32{3, 4}, nh, 3, filled(3, 5), "cannot go back"},
		{"negative", []int32{-1, 0}, nh, 0, filled(0, 0), "negative"},
		{"window mismatch", []int32{0, 1}, nh, 4, filled(3, 0), "window"},
		{"heads not a multiple", []int32{0, 1}, 3, 0, filled(0, 0), "multiple"},
		{"past context", []int32{99, 100}, nh, 0, filled(0, 99), "beyond the context length 100"},
		{"nil cache", []int32{0, 1}, nh, 0, nil, "no KV cache"},
	} {
		err := Attention(out[:2*tc.nh*d], q[:2*tc.nh*d], kv, kv, tc.pos, 2, tc.nh, nkv, d, tc.window, 1, tc.cache)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	if err := Attention(out, q, kv[:nkv*d], kv, []int32{0, 1}, 2, nh, nkv, d, 0, 1, filled(0, 0)); err == nil {
		t.Error("short k accepted")
	}
}

// BenchmarkAttentionDecode is one decode step of a Laguna-XS.2 full layer
// (48 query heads, 8 kv heads of 128) at position 4096.
func BenchmarkAttentionDecode(b *testing.B) {
	const nh, nkv, d, ctx = 48, 8, 128, 4096
	c, _ := NewKVCache(nkv, d, 0, ctx+1)
	kv := randSlice(1, ctx*nkv*d, 1)
	c.store(kv, kv, 0, ctx)
	q := randSlice(2, nh*d, 1)
	k := randSlice(3, nkv*d, 1)
	out := make([]float32, nh*d)
	for b.Loop() {
		c.n = ctx
		if err := Attention(out, q, k, k, []int32{ctx}, 1, nh, nkv, d, 0, 0.088, c); err != nil {
			b.Fatal(err)
		}
	}
}
