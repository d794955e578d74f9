package cpu

import "lagc/exec/cpu/internal/vec"

// kvRun is a run of consecutive key positions whose key and value rows lie
// at one stride in one buffer: row i at k[i*stride:], v[i*stride:].
type kvRun struct {
	k, v []float32
	n    int
}

// kvRuns splits the keys first..p seen by a query of kv head h into runs:
// earlier positions from the cache (a ring wraps once at most), positions
// from p0 on from this step's k and v [T,nkv,d].
func kvRuns(runs []kvRun, c *KVCache, k, v []float32, first, p, p0, h, nkv, d int) []kvRun {
	for j := first; j < min(p0, p+1); {
		end := min(p0, p+1)
		if c.Window > 0 {
			end = min(end, (j/c.Window+1)*c.Window) // the ring's last slot
		}
		kr, vr := c.keyRow(j, h), c.valueRow(j, h)
		kr, vr = kr[:cap(kr)], vr[:cap(vr)]
		if need := (end-j-1)*nkv*d + d; len(kr) < need || len(vr) < need {
			end = j + 1 // rows not laid out at the stride: one at a time
		}
		runs = append(runs, kvRun{kr, vr, end - j})
		j = end
	}
	if j := max(first, p0); j <= p {
		o := ((j-p0)*nkv + h) * d
		runs = append(runs, kvRun{k[o:], v[o:], p - j + 1})
	}
	return runs
}

// attendRuns writes to out [d] the attention of one query head q [d] over
// the keys of runs (rows at stride apart): scores q.k*scale, their softmax
// (probs holds one per key), then the sum of probability times value,
// keys in position order. Each score is one dot product and each output
// element one chain of multiply-adds over the keys, in an order fixed by d
// alone, so the result does not depend on where the rows live or how a
// prompt was split into steps.
func attendRuns(out, q []float32, runs []kvRun, stride, d int, scale float32, probs []float32) {
	i := 0
	for _, r := range runs {
		s := probs[i : i+r.n]
		vec.Dots(s, r.k, stride, q)
		for j := range s {
			s[j] *= scale
		}
		i += r.n
	}
	softmax(probs[:i])
	clear(out)
	i = 0
	for _, r := range runs {
		vec.AddScaled(out, r.v, stride, probs[i:i+r.n])
		i += r.n
	}
}
