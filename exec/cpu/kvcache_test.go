package cpu

import (
	"lagc/config"
	"testing"
)

func TestNewCaches(t *testing.T) {
	cfg := config.Defaults()
	cfg.NumLayers = 5
	cfg.LayerTypes = []string{config.FullAttention, config.SlidingAttention, config.SlidingAttention, config.FullAttention, config.SlidingAttention}
	cfg.MLPLayerTypes, cfg.HeadsPerLayer, cfg.RopeParameters = nil, nil, nil
	cfg.SlidingWindow = 6
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	caches, err := NewCaches(cfg, 100)
	if err != nil {
		t.Fatal(err)
	}
	for l, c := range caches {
		wantW := 0
		if cfg.IsSliding(l) {
			wantW = 6
		}
		if c.Window != wantW || c.NKV != cfg.NumKVHeads || c.HeadDim != cfg.HeadDim || c.MaxPos != 100 || c.Len() != 0 {
			t.Errorf("layer %d: %+v", l, c)
		}
		if len(c.k) != 0 {
			t.Errorf("layer %d: %d floats before any position", l, len(c.k))
		}
	}
	def, err := NewCaches(cfg, 0)
	if err != nil || def[0].MaxPos != cfg.MaxPositionEmbeddings {
		t.Fatalf("default context: %v, %v", def[0].MaxPos, err)
	}
}

func TestKVCacheGrowKeepsRows(t *testing.T) {
	for _, window := range []int{0, 5} {
		c, err := NewKVCache(2, 3, window, 40)
		if err != nil {
			t.Fatal(err)
		}
		const P = 37 // linear: grows past 16 and 32 slots
		for p := 0; p < P; p++ {
			k := []float32{float32(p), 1, 2, float32(-p), 3, 4}
			v := []float32{float32(2 * p), 0, 0, 0, 0, float32(p)}
			c.store(k, v, p, 1)
		}
		first := 0
		if window > 0 {
			first = P - window
		}
		for p := first; p < P; p++ {
			if c.keyRow(p, 0)[0] != float32(p) || c.keyRow(p, 1)[0] != float32(-p) || c.valueRow(p, 1)[2] != float32(p) || c.valueRow(p, 0)[0] != float32(2*p) {
				t.Fatalf("window %d: position %d lost", window, p)
			}
		}
		if c.Len() != P {
			t.Fatalf("Len = %d", c.Len())
		}
		c.Reset()
		if c.Len() != 0 {
			t.Fatal("Reset kept positions")
		}
	}
	// Memory follows use: a ring stops at its window, a linear cache at its
	// context, and a ring wider than the context at the context.
	for _, tc := range []struct{ window, maxPos, positions, slots int }{
		{6, 100, 3, 6}, {6, 100, 40, 6}, {0, 100, 3, 16}, {0, 100, 17, 32}, {0, 20, 20, 20}, {512, 8, 8, 8},
	} {
		c, _ := NewKVCache(1, 2, tc.window, tc.maxPos)
		for p := 0; p < tc.positions; p++ {
			c.store([]float32{1, 2}, []float32{3, 4}, p, 1)
		}
		if len(c.k) != tc.slots*2 || len(c.v) != tc.slots*2 {
			t.Errorf("%+v: %d slots", tc, len(c.k)/2)
		}
	}
}

func TestNewKVCacheErrors(t *testing.T) {
	for _, a := range [][4]int{{0, 4, 0, 10}, {1, 0, 0, 10}, {1, 4, -1, 10}, {1, 4, 0, 0}} {
		if _, err := NewKVCache(a[0], a[1], a[2], a[3]); err == nil {
			t.Errorf("NewKVCache%v accepted", a)
		}
	}
}
