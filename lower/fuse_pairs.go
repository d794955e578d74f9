package lower

// The launch-stream fusions (fuseAttnQ8X, fuseAddNorm, fuseRouter,
// fuseQGEMVXIn) each replace two consecutive launches of a stream, a list
// per step, by one. fusePairs is that walk, once.

// ArgKinds reports whether the arguments a are of the kinds given, in
// order (the launch-stream passes and the executor read launches back
// this way).
func ArgKinds(a []Arg, kinds ...string) bool {
	if len(a) != len(kinds) {
		return false
	}
	for i, k := range kinds {
		if a[i].Kind != k {
			return false
		}
	}
	return true
}

// fusePairs walks steps' launches in stream order, across steps. Where
// fuse accepts a launch a and the one right after it, b (rest: the
// launches after b, for invariants that look ahead), a's place (b's with
// atB) gets the fused launch, the other is dropped, and the walk goes on
// after b. In place.
func fusePairs(steps [][]Launch, atB bool, fuse func(a, b Launch, rest []Launch) (Launch, bool)) {
	where := streamOrder(steps)
	flat := make([]Launch, len(where))
	for k, p := range where {
		flat[k] = steps[p.step][p.i]
	}
	drop := map[streamPos]bool{}
	for k := 0; k+1 < len(flat); k++ {
		f, ok := fuse(flat[k], flat[k+1], flat[k+2:])
		if !ok {
			continue
		}
		keep, gone := where[k], where[k+1]
		if atB {
			keep, gone = gone, keep
		}
		steps[keep.step][keep.i] = f
		drop[gone] = true
		k++
	}
	if len(drop) == 0 {
		return
	}
	for i, ls := range steps {
		if len(ls) == 0 {
			continue // as it was, nil or empty: plans compare with reflect.DeepEqual
		}
		var kept []Launch
		for j, l := range ls {
			if !drop[streamPos{i, j}] {
				kept = append(kept, l)
			}
		}
		steps[i] = kept
	}
}

// streamPos is a launch's place in steps: step, then index.
type streamPos struct{ step, i int }

// streamOrder lists steps' launches' places in stream order, across steps.
func streamOrder(steps [][]Launch) []streamPos {
	var where []streamPos
	for i, ls := range steps {
		for j := range ls {
			where = append(where, streamPos{i, j})
		}
	}
	return where
}
