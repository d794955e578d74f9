package cuda

import (
	"regexp"
	"strings"
	"testing"
)

// TestKernelsWaitFirst: every kernel's body begins with pdl_wait(), so no
// kernel touches memory before the one before it in a programmatic stream
// (SetProgrammaticLaunch) has completed. A kernel without it would race.
// The exceptions below wait later by design, each with the invariant that
// makes its earlier reads safe.
var waitLater = map[string]string{
	// Its GEMV reads, before the wait, only weights and activations that
	// launches before the previous one wrote (lower.XInPre checks it).
	"qgemv_xin_norm_pre": "lower.XInPre",
	// Its route ids and weights, staged bytes and first weights before the
	// wait: the router two launches before wrote the first, the rest never
	// change (lower.DownPre checks it).
	"moe_down_qgemv_pre": "lower.DownPre",
	// Each lane's first weights before the wait, which no launch writes
	// (lower.QGEMV refuses a matrix outside the weights or a caller's
	// device buffer; exec/gpu's TestQGEMVWeightsOnlyBeforeWait checks
	// every trace plan; TestQGEMVWPreGPU the bits against the wait-first
	// form, -DLAGC_QGEMV_WAIT_FIRST).
	"qgemv": "lower.QGEMV",
}

func TestKernelsWaitFirst(t *testing.T) {
	global := regexp.MustCompile(`(?m)^[^/\n]*__global__`)
	n := 0
	for _, f := range SourceFiles() {
		if !strings.HasSuffix(f, ".cu") {
			continue
		}
		src, err := Source(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, loc := range global.FindAllStringIndex(src, -1) {
			body, ok := kernelBody(src[loc[1]:])
			name := strings.Fields(src[loc[0]:min(loc[1]+200, len(src))])
			if !ok {
				t.Errorf("%s: a kernel without a body at %v", f, name)
				continue
			}
			n++
			if exempt(src[loc[1]:]) {
				continue
			}
			if !strings.HasPrefix(strings.TrimSpace(body), "pdl_wait();") {
				t.Errorf("%s: kernel %v does not begin with pdl_wait()", f, name)
			}
		}
	}
	if n < 40 {
		t.Errorf("found %d kernels, expected the 40 or more in cuda/kernels", n)
	}
}

// exempt reports whether the kernel whose declaration decl continues is
// one of waitLater's (its name before the parameter list; the launch
// bounds and the LAGC_MINB macro inside them come first).
func exempt(decl string) bool {
	for _, m := range callName.FindAllStringSubmatch(decl, 4) {
		if m[1] != "__launch_bounds__" && m[1] != "LAGC_MINB" {
			return waitLater[m[1]] != ""
		}
	}
	return false
}

var callName = regexp.MustCompile(`(\w+)\s*\(`)

// kernelBody is what follows the opening brace of the function whose
// declaration s continues: the first { outside parentheses.
func kernelBody(s string) (string, bool) {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ';':
			if depth == 0 {
				return "", false
			}
		case '{':
			if depth == 0 {
				return s[i+1:], true
			}
		}
	}
	return "", false
}
