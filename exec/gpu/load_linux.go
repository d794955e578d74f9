package gpu

import "golang.org/x/sys/unix"

// defaultLoadBudget is an eighth of physical memory, between 1 and 16
// GiB: the Go heap may grow to about twice what is live before a
// collection.
func defaultLoadBudget() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 4 << 30
	}
	return min(max(int64(si.Totalram)*int64(si.Unit)/8, 1<<30), 16<<30)
}
