package gpu

import (
	"regexp"
	"strings"
	"testing"

	"lagc/lower"
)

// TestWithoutSkipped: LAGC_SKIP_KERNELS leaves out exactly the launches of
// the kernels it matches, in order, and counts them; unset, nothing.
func TestWithoutSkipped(t *testing.T) {
	ls := []lower.Launch{{Kernel: "qgemv"}, {Kernel: "attn_decode"}, {Kernel: "qgemv_norm"}, {Kernel: "moe_gateup_qgemv"}, {}}
	names := func(ls []lower.Launch) string {
		var s []string
		for _, l := range ls {
			s = append(s, l.Kernel)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		re   string
		want string
		n    int
	}{
		{"", "qgemv,attn_decode,qgemv_norm,moe_gateup_qgemv,", 0},
		{"^attn_decode$", "qgemv,qgemv_norm,moe_gateup_qgemv,", 1},
		{"^qgemv", "attn_decode,moe_gateup_qgemv,", 2},
		{"qgemv", "attn_decode,", 3},
		{"nothing", "qgemv,attn_decode,qgemv_norm,moe_gateup_qgemv,", 0},
		{".", "", 4},
	} {
		var re *regexp.Regexp
		if c.re != "" {
			re = regexp.MustCompile(c.re)
		}
		got, n := withoutSkipped(ls, re)
		if names(got) != c.want || n != c.n {
			t.Errorf("%q: kept %s (%d left out), want %s (%d)", c.re, names(got), n, c.want, c.n)
		}
	}
}

// TestSkipKernelsEnv: unset is nil; a bad expression is an error naming
// the variable.
func TestSkipKernelsEnv(t *testing.T) {
	t.Setenv(EnvSkipKernels, "")
	if re, err := skipKernels(); re != nil || err != nil {
		t.Errorf("unset: %v, %v", re, err)
	}
	t.Setenv(EnvSkipKernels, "attn_(")
	if _, err := skipKernels(); err == nil || !strings.Contains(err.Error(), EnvSkipKernels) {
		t.Errorf("a bad expression: %v", err)
	}
	t.Setenv(EnvSkipKernels, "^attn_decode$")
	if re, err := skipKernels(); err != nil || !re.MatchString("attn_decode") {
		t.Errorf("attn_decode: %v, %v", re, err)
	}
}
