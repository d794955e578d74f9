package gpu_test

// The weight cache on the device: a model loaded from cache entries runs
// bitwise as the one converted at load, damaged entries are rebuilt, and
// the cache can be turned off. Needs a GPU.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"lagc/cuda/cudatest"
	"lagc/engine"
	"lagc/exec/gpu"
	"lagc/internal/cachedir"
	"lagc/internal/fixture"
	"lagc/wcache"
)

// TestWeightCacheGPU loads the q4_k_m fixture (quantised matrices in the
// device layout, derived and split weights, bf16 norms) four times: cold
// (every entry written), warm (every weight from the cache, no source
// hashed), with every entry damaged (each rebuilt), with the cache off.
// Each run's prompt logits and greedy tokens are identical.
func TestWeightCacheGPU(t *testing.T) {
	cudatest.Device(t)
	root := t.TempDir()
	t.Setenv(cachedir.Env, root)
	t.Setenv(gpu.EnvWeightCache, "all") // quantised weights too: every kind of entry
	// A copy modified an hour ago, so the hash memo keeps it.
	data, err := os.ReadFile("../../testdata/quant/q4_k_m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "q4_k_m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	type result struct {
		logits [][]float32
		greedy []int32
		stats  gpu.LoadStats
		log    string
	}
	load := func(noCache bool) result {
		t.Helper()
		var log bytes.Buffer
		m, err := engine.Open(path, engine.Options{Device: "cuda", MaxContext: 64, NoWeightCache: noCache, Progress: &log})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		res, err := m.Generate(context.Background(), []int32{1, 5, 9, 13, 17, 21}, engine.GenOptions{MaxTokens: 8, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		return result{res.PromptRows, res.Generated, m.Backend.(*gpu.Executor).LoadStats(), log.String()}
	}
	same := func(what string, a, b result) {
		t.Helper()
		for p := range a.logits {
			if !slices.Equal(a.logits[p], b.logits[p]) {
				t.Errorf("%s: prompt logits at %d differ", what, p)
				break
			}
		}
		if !slices.Equal(a.greedy, b.greedy) {
			t.Errorf("%s: greedy %v, want %v", what, b.greedy, a.greedy)
		}
	}

	cold := load(false)
	n := cold.stats.Weights
	if n == 0 || cold.stats.Hits != 0 || cold.stats.Written != n {
		t.Fatalf("cold: %+v", cold.stats)
	}
	warm := load(false)
	if warm.stats.Hits != n || warm.stats.Written != 0 || warm.stats.HashedBytes != 0 {
		t.Errorf("warm: %d of %d hits, %d written, %d source bytes hashed", warm.stats.Hits, n, warm.stats.Written, warm.stats.HashedBytes)
	}
	same("warm", cold, warm)

	entries, _ := filepath.Glob(filepath.Join(root, "weights", "*"+wcache.EntrySuffix))
	if len(entries) == 0 {
		t.Fatal("no entries in the cache")
	}
	for _, e := range entries {
		fixture.FlipBit(t, e, -1) // in the payload
	}
	damaged := load(false)
	// Weights of identical contents share an entry: one may find it rebuilt.
	if st := damaged.stats; st.Rebuilt < len(entries) || st.Rebuilt+st.Hits != n || !bytes.Contains([]byte(damaged.log), []byte("damaged")) {
		t.Errorf("damaged: %d of %d entries rebuilt; log:\n%s", damaged.stats.Rebuilt, len(entries), damaged.log)
	}
	same("damaged entries", cold, damaged)

	off := load(true)
	if off.stats.Hits != 0 || off.stats.Written != 0 || off.stats.Cache != "off" {
		t.Errorf("cache off: %+v", off.stats)
	}
	same("cache off", cold, off)
	t.Logf("cold: %s", cold.stats.Summary())
	t.Logf("warm: %s", warm.stats.Summary())
}
