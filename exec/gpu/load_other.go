//go:build !linux

package gpu

// defaultLoadBudget is 4 GiB where physical memory is not at hand.
func defaultLoadBudget() int64 { return 4 << 30 }
