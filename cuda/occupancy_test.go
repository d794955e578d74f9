package cuda

import "testing"

// TestSM90Fit checks Fit against CUDA's occupancy calculator's arithmetic
// worked by hand for an H100/H200 SM (64K registers as 4 sub-partitions
// of 16K, 256-register warp units, 228 KiB of shared memory with 1 KiB
// reserved a block, 2048 threads, 32 blocks).
func TestSM90Fit(t *testing.T) {
	gateUp := BlockShape{Threads: 256, Registers: 80, Shared: 19968 + 256}
	down := BlockShape{Threads: 128, Registers: 160, Shared: 21760 + 512}
	for _, c := range []struct {
		name string
		held []BlockShape // blocks already on the SM
		b    BlockShape
		want int
		why  string
	}{
		// 64 registers: 2048 a warp, 8 warps a sub-partition, 32 an SM.
		{"qgemv", nil, BlockShape{Threads: 256, Registers: 64}, 4, "registers"},
		// 128 registers: 4096 a warp, 16 warps an SM; 9 a block.
		{"attention", nil, BlockShape{Threads: 288, Registers: 128, Shared: 38400}, 1, "registers"},
		// 160 registers: 5120 a warp, 3 a sub-partition, 12 an SM.
		{"routed down", nil, down, 3, "registers"},
		// 192 registers in one-warp blocks: 6144 a warp, 2 a sub-partition
		// (the SM's total alone would allow 10).
		{"sub-partitions", nil, BlockShape{Threads: 32, Registers: 192}, 8, "registers"},
		{"shared", nil, BlockShape{Threads: 256, Registers: 32, Shared: 100 << 10}, 2, "shared"},
		{"threads", nil, BlockShape{Threads: 1024, Registers: 16}, 2, "threads"},
		{"blocks", nil, BlockShape{Threads: 32, Registers: 16}, 32, "blocks"},
		// Three gate+up blocks leave each sub-partition 1024 registers; two
		// leave 6144, a down warp's 5120.
		{"down beside 3 gate+up", []BlockShape{gateUp, gateUp, gateUp}, down, 0, "registers"},
		{"down beside 2 gate+up", []BlockShape{gateUp, gateUp}, down, 1, "registers"},
		{"gate+up beside 1 attention", []BlockShape{{Threads: 288, Registers: 128, Shared: 38400}}, gateUp, 1, "registers"},
	} {
		var s SMLoad
		for _, h := range c.held {
			s = SM90.Add(s, h, 1)
		}
		n, why, err := SM90.Fit(s, c.b)
		if err != nil || n != c.want || why != c.why {
			t.Errorf("%s: %d blocks (stopped by %q), err %v; want %d (%q)", c.name, n, why, err, c.want, c.why)
		}
	}
	for _, b := range []BlockShape{{Threads: 1024, Registers: 255}, {Threads: 0}, {Threads: 64, Shared: 300 << 10}} {
		if n, _, err := SM90.Fit(SMLoad{}, b); err == nil {
			t.Errorf("%+v: %d blocks, no error", b, n)
		}
	}
}
