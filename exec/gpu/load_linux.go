package gpu

import "golang.org/x/sys/unix"

// defaultLoadBudget is a quarter of physical memory, between 1 and 32 GiB.
func defaultLoadBudget() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 4 << 30
	}
	return min(max(int64(si.Totalram)*int64(si.Unit)/4, 1<<30), 32<<30)
}
