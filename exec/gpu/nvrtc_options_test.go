package gpu

import (
	"slices"
	"testing"
)

// TestNVRTCOptions: LAGC_NVRTC_OPTIONS's first matching REGEX:OPTIONS
// gives a kernel its options, others none; malformed values are refused.
func TestNVRTCOptions(t *testing.T) {
	t.Setenv(EnvNVRTCOptions, "^qgemv_norm$:-DLAGC_MINB_FORCE=4; moe_.* : -DA=1 -DB=2;qgemv:--maxrregcount=96")
	for _, c := range []struct {
		kernel string
		want   []string
	}{
		{"qgemv_norm", []string{"-DLAGC_MINB_FORCE=4"}},
		{"moe_gateup_qgemv_trig", []string{"-DA=1", "-DB=2"}},
		{"qgemv_xin_norm_pre", []string{"--maxrregcount=96"}},
		{"attn_decode", nil},
	} {
		got, err := nvrtcOptions(c.kernel)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, err %v; want %v", c.kernel, got, err, c.want)
		}
	}
	for _, bad := range []string{"qgemv", "qgemv:", "qgemv:DX=1", "(:-DX"} {
		t.Setenv(EnvNVRTCOptions, bad)
		if got, err := nvrtcOptions("qgemv"); err == nil {
			t.Errorf("%s=%q: %v, no error", EnvNVRTCOptions, bad, got)
		}
	}
	t.Setenv(EnvNVRTCOptions, "")
	if got, err := nvrtcOptions("qgemv"); err != nil || got != nil {
		t.Errorf("unset: %v, %v", got, err)
	}
}
