package gpu

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
)

// EnvNVRTCOptions gives kernels extra NVRTC options, for experiments:
// REGEX:OPTIONS pairs separated by ';', OPTIONS (space-separated) going to
// the kernels whose name REGEX matches (the first match wins; the first
// ':' ends REGEX). For example
// 'moe_gateup_qgemv_trig|moe_down_qgemv_pre:-DLAGC_MINB_FORCE=4' compiles
// those two with four blocks an SM in their launch bounds (prelude.cuh's
// LAGC_MINB). NVRTC ignores --maxrregcount for a kernel with launch
// bounds, which every decode GEMV has. The kernels so compiled are cached
// apart from the others; `lagc plan --resources` reports them as compiled.
const EnvNVRTCOptions = "LAGC_NVRTC_OPTIONS"

type kernelOptions struct {
	re   *regexp.Regexp
	opts []string
}

// parsedOptions is EnvNVRTCOptions's value as last parsed: Kernel asks at
// every bind, so the expressions are compiled once a value.
type parsedOptions struct {
	v     string
	rules []kernelOptions
	err   error
}

var lastOptions atomic.Pointer[parsedOptions]

// nvrtcOptions is the extra NVRTC options EnvNVRTCOptions gives kernel.
func nvrtcOptions(kernel string) ([]string, error) {
	v := os.Getenv(EnvNVRTCOptions)
	if v == "" {
		return nil, nil
	}
	p := lastOptions.Load()
	if p == nil || p.v != v {
		rules, err := parseNVRTCOptions(v)
		p = &parsedOptions{v, rules, err}
		lastOptions.Store(p)
	}
	if p.err != nil {
		return nil, p.err
	}
	for _, r := range p.rules {
		if r.re.MatchString(kernel) {
			return slices.Clone(r.opts), nil // callers append (compileLaunch): not the shared rule's
		}
	}
	return nil, nil
}

func parseNVRTCOptions(v string) ([]kernelOptions, error) {
	var rules []kernelOptions
	for _, part := range strings.Split(v, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		expr, opts, ok := strings.Cut(part, ":")
		fields := strings.Fields(opts)
		if !ok || len(fields) == 0 {
			return nil, fmt.Errorf("%s=%q: %q is not REGEX:OPTIONS", EnvNVRTCOptions, v, part)
		}
		for _, f := range fields {
			if !strings.HasPrefix(f, "-") {
				return nil, fmt.Errorf("%s=%q: %q is not an NVRTC option (they start with -)", EnvNVRTCOptions, v, f)
			}
		}
		re, err := regexp.Compile(strings.TrimSpace(expr))
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", EnvNVRTCOptions, v, err)
		}
		rules = append(rules, kernelOptions{re, fields})
	}
	return rules, nil
}
