package cuda

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// logExcerpt finds the locations "FILE(LINE): " that NVRTC's log names in
// file and returns those source lines with one line of context each side,
// numbered as in the kernel's own .cu file.
func logExcerpt(log, file, src string) string {
	prefix := file + "("
	want := map[int]bool{}
	for _, l := range strings.Split(log, "\n") {
		i := strings.Index(l, prefix)
		if i < 0 {
			continue
		}
		rest := l[i+len(prefix):]
		j := strings.Index(rest, "):")
		if j <= 0 {
			continue
		}
		n, err := strconv.Atoi(rest[:j])
		if err != nil || n <= 0 {
			continue
		}
		want[n] = true
	}
	if len(want) == 0 {
		return ""
	}
	lines := userLines(src, file)
	show := map[int]bool{}
	for n := range want {
		for k := n - 1; k <= n+1; k++ {
			if k >= 1 && k <= len(lines) {
				show[k] = true
			}
		}
	}
	nums := make([]int, 0, len(show))
	for k := range show {
		nums = append(nums, k)
	}
	sort.Ints(nums)
	var b strings.Builder
	prev := 0
	for _, k := range nums {
		if prev != 0 && k != prev+1 {
			b.WriteString("  ...\n")
		}
		mark := " "
		if want[k] {
			mark = ">"
		}
		fmt.Fprintf(&b, "%s%5d | %s\n", mark, k, lines[k-1])
		prev = k
	}
	return b.String()
}

// userLines returns the lines of src after the `#line 1 "file"` directive
// that ends the prelude, so that numbers match the kernel's file.
func userLines(src, file string) []string {
	marker := "#line 1 \"" + file + "\"\n"
	if i := strings.Index(src, marker); i >= 0 {
		src = src[i+len(marker):]
	}
	return strings.Split(src, "\n")
}
