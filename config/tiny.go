package config

func init() {
	presets["synthetic-tiny"] = Tiny
}

// Tiny returns a 4-layer Laguna small enough to print whole in a test
// failure and to run on the CPU in milliseconds: hidden 32, query heads
// (4,2,2,2) over 2 kv heads of 8 channels, 6 experts (top 2), window 5,
// YaRN on the full layers. Preset name: synthetic-tiny (a shape only: the
// bundled trained model, models/tiny, is another, larger one).
func Tiny() *Config {
	c := lagunaPreset(32, 4, [4]int{4, 2, 2, 2}, 6, 2, 16, 16, 48, 4)
	c.VocabSize, c.NumKVHeads, c.HeadDim, c.SlidingWindow = 64, 2, 8, 5
	c.MaxPositionEmbeddings = 64
	full := c.RopeParameters[FullAttention]
	full.OriginalContext = 16
	c.RopeParameters[FullAttention] = full
	c.RoutedScaling, c.RouterSoftcap = 2.5, 30
	return c
}
