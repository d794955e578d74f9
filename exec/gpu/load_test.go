package gpu

// The host side of weight loading, without a GPU: conversion with bounded
// parallelism against the serial path, the weight cache's hits, rebuilds
// and keys.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lagc/ckpt"
	"lagc/internal/fixture"
	"lagc/ir"
	"lagc/lower"
	"lagc/models"
	"lagc/passes"
	"lagc/quant"
	"lagc/wcache"
)

// quantPlan lowers the q4_k_m fixture as the GPU would run it: quantised
// matrices in the device layout (concatenated attention projections, split
// gate_up stacks), norms and the router converted to the activation dtype.
func quantPlan(t testing.TB) (*lower.Plan, ckpt.Checkpoint) {
	t.Helper()
	// A copy last modified an hour ago: the hash memo does not keep files
	// modified moments before (a fresh checkout's could be).
	data, err := os.ReadFile("../../testdata/quant/q4_k_m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "q4_k_m.gguf")
	old := time.Now().Add(-time.Hour)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	ck, err := ckpt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return lowerCheckpoint(t, ck), ck
}

// lowerCheckpoint is the plan of ck for an H200 (bf16 activations).
func lowerCheckpoint(t testing.TB, ck ckpt.Checkpoint) *lower.Plan {
	t.Helper()
	g, err := models.Build("laguna.yaml", models.LagunaYAML, ck.Config(), models.BuildOptions{WeightDType: ir.BF16})
	if err != nil {
		t.Fatal(err)
	}
	if err := models.SetWeightTypes(g, func(name string, shape []int) string {
		ti, _ := ck.Tensor(name)
		return ti.DType.String()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := passes.Run(g, passes.Options{}); err != nil {
		t.Fatal(err)
	}
	p, err := lower.Lower(g, lower.Options{DType: ir.BF16, Chunk: 16, MaxContext: 64, SMs: 132, CC: 90})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serialWeights is every uploaded weight converted one after another.
func serialWeights(t *testing.T, p *lower.Plan, ws WeightSource) map[int][]byte {
	t.Helper()
	out := map[int][]byte{}
	for i, w := range p.Weights {
		if w.Offset < 0 {
			continue
		}
		b, err := convertWeight(p, ws, i)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// collect runs hostLoad and returns what the sink received, in order.
func collect(t *testing.T, p *lower.Plan, ws WeightSource, c loadConfig) ([]int, map[int][]byte, LoadStats) {
	t.Helper()
	var order []int
	got := map[int][]byte{}
	st, err := hostLoad(p, ws, c, func(i int, b []byte) error {
		order = append(order, i)
		got[i] = bytes.Clone(b) // a mapped entry is unmapped after the sink
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return order, got, st
}

func TestHostLoadMatchesSerial(t *testing.T) {
	p, ck := quantPlan(t)
	want := serialWeights(t, p, ck)
	kinds := map[string]int{}
	for _, w := range p.Weights {
		if w.Offset >= 0 {
			k := w.Layout
			if w.From != nil {
				k += "+derived"
			}
			kinds[k]++
		}
	}
	for _, k := range []string{"", lower.LayoutQuant, lower.LayoutQuant + "+derived", lower.LayoutGateUpSplitQuant + "+derived"} {
		if kinds[k] == 0 {
			t.Fatalf("the plan has no weight of layout %q (%v): the test would not cover it", k, kinds)
		}
	}
	var largest int64
	for i := range p.Weights {
		largest = max(largest, hostCost(p, i))
	}
	dir := t.TempDir()
	cache := wcache.Open(dir)
	for _, c := range []struct {
		name     string
		cfg      loadConfig
		wantHits bool
	}{
		{"serial, no cache", loadConfig{workers: 1, budget: 1 << 40, off: "off"}, false},
		{"parallel, no cache", loadConfig{workers: 4, budget: 1 << 40, off: "off"}, false},
		{"budget below the largest weight", loadConfig{workers: 4, budget: largest / 2, off: "off"}, false},
		{"cold cache", loadConfig{workers: 3, budget: 1 << 40, cache: cache, quant: true, hasher: wcache.NewHasher(wcache.SourcesDir(dir))}, false},
		{"warm cache", loadConfig{workers: 3, budget: 1 << 40, cache: cache, quant: true, hasher: wcache.NewHasher(wcache.SourcesDir(dir))}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			order, got, st := collect(t, p, ck, c.cfg)
			if !slices.IsSorted(order) || len(order) != len(want) {
				t.Fatalf("sink saw weights %v, want each of %d in plan order", order, len(want))
			}
			for i, b := range want {
				if !bytes.Equal(got[i], b) {
					t.Errorf("weight %s differs from the serial conversion", p.Weights[i].Name)
				}
			}
			if st.Weights != len(want) {
				t.Errorf("stats count %d weights, want %d", st.Weights, len(want))
			}
			switch {
			case c.cfg.cache == nil && (st.Hits != 0 || st.Written != 0):
				t.Errorf("no cache, yet %d hits and %d written", st.Hits, st.Written)
			case c.cfg.cache != nil && c.wantHits && (st.Hits != len(want) || st.Written != 0 || st.HashedBytes != 0):
				t.Errorf("warm: %d of %d hits, %d written, %d bytes hashed (the memo should give every hash)",
					st.Hits, len(want), st.Written, st.HashedBytes)
			case c.cfg.cache != nil && !c.wantHits && (st.Hits != 0 || st.Written != len(want)):
				t.Errorf("cold: %d hits, %d of %d written", st.Hits, st.Written, len(want))
			}
		})
	}
}

// TestHostLoadQuantisedUncached: by default quantised weights are
// repacked at every load, not cached; the others are cached.
func TestHostLoadQuantisedUncached(t *testing.T) {
	p, ck := quantPlan(t)
	want := serialWeights(t, p, ck)
	quantised := 0
	for i, w := range p.Weights {
		if w.Offset >= 0 && lower.IsQuantLayout(w.Layout) {
			quantised++
		} else if w.Offset >= 0 && want[i] == nil {
			t.Fatalf("weight %s has no serial conversion", w.Name)
		}
	}
	if quantised == 0 || quantised == len(want) {
		t.Fatalf("%d of %d weights quantised: the test needs both kinds", quantised, len(want))
	}
	dir := t.TempDir()
	cfg := loadConfig{workers: 2, budget: 1 << 40, cache: wcache.Open(dir), hasher: wcache.NewHasher(wcache.SourcesDir(dir))}
	for _, warm := range []bool{false, true} {
		_, got, st := collect(t, p, ck, cfg)
		for i, b := range want {
			if !bytes.Equal(got[i], b) {
				t.Errorf("weight %s differs from the serial conversion", p.Weights[i].Name)
			}
		}
		hits, written := 0, len(want)-quantised
		if warm {
			hits, written = len(want)-quantised, 0
		}
		if st.Repacked != quantised || st.Hits != hits || st.Written != written {
			t.Errorf("warm %v: %d repacked, %d hits, %d written; want %d, %d, %d", warm, st.Repacked, st.Hits, st.Written, quantised, hits, written)
		}
	}
}

// TestGateUpParts: a split gate_up stack repacked from its gate and up
// stacks in place is the stack joined, split and repacked.
func TestGateUpParts(t *testing.T) {
	p, ck := quantPlan(t)
	n := 0
	for i, w := range p.Weights {
		if w.Offset < 0 || w.Layout != lower.LayoutGateUpSplitQuant {
			continue
		}
		n++
		got, err := convertWeight(p, ck, i)
		if err != nil {
			t.Fatal(err)
		}
		qt, _ := quant.ParseType(w.DType)
		raw, err := rawWeight(p, ck, i)
		if err != nil {
			t.Fatal(err)
		}
		split, err := splitGateUpRows(raw, w.Shape, qt)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, w.Bytes)
		K := w.Shape[2]
		if err := lower.RepackQuant(qt, elems(w.Shape)/K, K, split, want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from joining, splitting and repacking", w.Name)
		}
		if _, ok, _ := gateUpParts(p, ck, i); !ok {
			t.Errorf("%s did not take the in-place path", w.Name)
		}
	}
	if n == 0 {
		t.Fatal("no split gate_up stack in the plan")
	}
}

// TestHostLoadDamagedEntry: a damaged entry is reported, never used, and
// rebuilt; the weight is still right.
func TestHostLoadDamagedEntry(t *testing.T) {
	p, ck := quantPlan(t)
	want := serialWeights(t, p, ck)
	dir := t.TempDir()
	cfg := func(warn func(string)) loadConfig {
		return loadConfig{workers: 2, budget: 1 << 40, cache: wcache.Open(dir), quant: true, hasher: wcache.NewHasher(wcache.SourcesDir(dir)), warn: warn}
	}
	collect(t, p, ck, cfg(nil))
	entries, err := filepath.Glob(filepath.Join(dir, "*"+wcache.EntrySuffix))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no entries written: %v", err)
	}
	for _, e := range entries {
		fixture.FlipBit(t, e, -1) // in the payload
	}
	var mu sync.Mutex
	var warnings []string
	_, got, st := collect(t, p, ck, cfg(func(m string) { mu.Lock(); warnings = append(warnings, m); mu.Unlock() }))
	for i, b := range want {
		if !bytes.Equal(got[i], b) {
			t.Errorf("weight %s: a damaged entry was used", p.Weights[i].Name)
		}
	}
	// Weights of identical contents share an entry: one may find it rebuilt.
	if st.Hits != len(want)-st.Rebuilt || st.Rebuilt < len(entries) || len(warnings) != st.Rebuilt {
		t.Errorf("%d hits, %d rebuilt, %d warnings; %d entries damaged", st.Hits, st.Rebuilt, len(warnings), len(entries))
	}
	if len(warnings) > 0 && !strings.Contains(warnings[0], "damaged") {
		t.Errorf("warning %q", warnings[0])
	}
	_, _, st = collect(t, p, ck, cfg(nil))
	if st.Hits != len(want) {
		t.Errorf("after the rebuild: %d of %d hits", st.Hits, len(want))
	}
}

// TestHostLoadUnwritableCache: a cache that cannot be read or written is
// warned about once each, and every weight is still right.
func TestHostLoadUnwritableCache(t *testing.T) {
	p, ck := quantPlan(t)
	want := serialWeights(t, p, ck)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var warnings []string
	c := loadConfig{workers: 3, budget: 1 << 40, cache: wcache.Open(notDir), hasher: wcache.NewHasher(""), failed: &loadFailures{},
		warn: func(m string) { mu.Lock(); warnings = append(warnings, m); mu.Unlock() }}
	_, got, st := collect(t, p, ck, c)
	for i, b := range want {
		if !bytes.Equal(got[i], b) {
			t.Errorf("weight %s differs", p.Weights[i].Name)
		}
	}
	if st.Written != 0 || len(warnings) != 2 || !strings.Contains(warnings[0]+warnings[1], "without writing entries") {
		t.Errorf("%d written; warnings %q", st.Written, warnings)
	}
}

// countingSource counts conversions of weights running at once.
type countingSource struct {
	ckpt.Checkpoint
	mu          sync.Mutex
	active, max int
}

func (s *countingSource) Raw(name string) ([]byte, error) {
	s.mu.Lock()
	s.active++
	s.max = max(s.max, s.active)
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	defer func() { s.mu.Lock(); s.active--; s.mu.Unlock() }()
	return s.Checkpoint.Raw(name)
}

// TestHostLoadBounded: conversions run in parallel, but never more at once
// than the memory budget admits.
func TestHostLoadBounded(t *testing.T) {
	p, ck := quantPlan(t)
	var costs []int64
	for i, w := range p.Weights {
		if w.Offset >= 0 && lower.IsQuantLayout(w.Layout) && w.From == nil {
			costs = append(costs, hostCost(p, i))
		}
	}
	slices.Sort(costs)
	// Room for the two smallest quantised weights, so at most two of any.
	budget := costs[0] + costs[1]
	for _, c := range []struct {
		budget  int64
		atMost  int
		atLeast int
	}{{1 << 40, 8, 2}, {budget, 2, 1}} {
		src := &countingSource{Checkpoint: ck}
		_, _, st := collect(t, p, src, loadConfig{workers: 8, budget: c.budget, off: "off"})
		if src.max > c.atMost || src.max < c.atLeast {
			t.Errorf("budget %d: %d conversions at once, want %d to %d", c.budget, src.max, c.atLeast, c.atMost)
		}
		if st.Budget != c.budget {
			t.Errorf("stats budget %d", st.Budget)
		}
	}
}

// TestHostLoadError: a failing sink stops the load with its error.
func TestHostLoadError(t *testing.T) {
	p, ck := quantPlan(t)
	calls := 0
	_, err := hostLoad(p, ck, loadConfig{workers: 4, budget: 1 << 40, off: "off"}, func(i int, b []byte) error {
		calls++
		if calls == 3 {
			return errors.New("device full")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "device full") || calls != 3 {
		t.Errorf("err %v after %d calls", err, calls)
	}
}

// TestWeightKey: the key changes with every input that shapes the bytes.
func TestWeightKey(t *testing.T) {
	p, ck := quantPlan(t)
	var qi, di int = -1, -1
	for i, w := range p.Weights {
		if w.Offset >= 0 && lower.IsQuantLayout(w.Layout) && w.From == nil && qi < 0 {
			qi = i
		}
		if w.Offset >= 0 && w.From != nil && di < 0 {
			di = i
		}
	}
	if qi < 0 || di < 0 {
		t.Fatal("no plain quantised or derived weight in the plan")
	}
	sums := func(override map[string]wcache.Sum) func(string) (wcache.Sum, error) {
		h := wcache.NewHasher("")
		return func(name string) (wcache.Sum, error) {
			if s, ok := override[name]; ok {
				return s, nil
			}
			return sourceSum(ck, h, name)
		}
	}
	key := func(i int, mod func(*lower.Plan), v keyVersions, override map[string]wcache.Sum) wcache.Key {
		q := *p
		q.Weights = slices.Clone(p.Weights)
		if mod != nil {
			mod(&q)
		}
		k, err := weightKeyV(&q, i, sums(override), v)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	v := currentKeyVersions()
	base := key(qi, nil, v, nil)
	if again := key(qi, nil, v, nil); again != base {
		t.Fatal("the key is not deterministic")
	}
	src := p.Weights[di].From.Srcs[0]
	for _, c := range []struct {
		name string
		i    int
		mod  func(*lower.Plan)
		v    keyVersions
		sums map[string]wcache.Sum
	}{
		{"source bytes", qi, nil, v, map[string]wcache.Sum{p.Weights[qi].Name: "00"}},
		{"quantised layout version", qi, nil, keyVersions{v.Format, v.QuantLayout + 1}, nil},
		{"conversion version", qi, nil, keyVersions{v.Format + 1, v.QuantLayout}, nil},
		{"device dtype", qi, func(q *lower.Plan) { q.Weights[qi].DType = "q6_k" }, v, nil},
		{"layout", qi, func(q *lower.Plan) { q.Weights[qi].Layout = lower.LayoutGateUpSplitQuant }, v, nil},
		{"shape", qi, func(q *lower.Plan) { q.Weights[qi].Shape = []int{1, 2} }, v, nil},
		{"a derived weight's source bytes", di, nil, v, map[string]wcache.Sum{p.Weights[src].Name: "00"}},
		{"a derived weight's transform", di, func(q *lower.Plan) {
			f := *q.Weights[di].From
			f.Axis++
			q.Weights[di].From = &f
		}, v, nil},
	} {
		k := key(c.i, c.mod, c.v, c.sums)
		ref := base
		if c.i == di {
			ref = key(di, nil, v, nil)
		}
		if k == ref {
			t.Errorf("%s: the key did not change", c.name)
		}
	}
	// The weight's name is not part of the key: content-keyed.
	if k := key(qi, func(q *lower.Plan) { q.Weights[qi].Name = p.Weights[qi].Name }, v, nil); k != base {
		t.Error("the key changed without a change")
	}
	if _, err := weightKeyV(p, len(p.Weights), sums(nil), v); err == nil {
		t.Error("a weight outside the plan was keyed")
	}
}
