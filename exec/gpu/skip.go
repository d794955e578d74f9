package gpu

import (
	"fmt"
	"os"
	"regexp"

	"lagc/lower"
)

// EnvSkipKernels is a regular expression on lower's kernel names (the
// __global__ function, e.g. attn_decode or moe_gateup_qgemv): the
// executor leaves those launches out of the decode programs it binds. An
// ablation for timing only: what a kernel costs in a graph replay, with
// its overlaps (programmatic launches, the tails of the kernels around
// it), is the step's time with it less the step's time without it,
// where Nsight times kernels one at a time. Outputs are wrong while it is
// set (lagc bench, run and serve say so). Decode only: a decode kernel
// reads what a left-out one would have written as whatever is there (an
// expert id out of range is skipped), where prefill's grouped GEMMs would
// take their tile tables' sizes from it.
const EnvSkipKernels = "LAGC_SKIP_KERNELS"

// skipKernels is EnvSkipKernels compiled, or nil when it is unset.
func skipKernels() (*regexp.Regexp, error) {
	v := os.Getenv(EnvSkipKernels)
	if v == "" {
		return nil, nil
	}
	re, err := regexp.Compile(v)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", EnvSkipKernels, v, err)
	}
	return re, nil
}

// withoutSkipped is ls without the launches of kernels re matches (ls
// itself when re is nil), and how many it left out.
func withoutSkipped(ls []lower.Launch, re *regexp.Regexp) ([]lower.Launch, int) {
	if re == nil {
		return ls, 0
	}
	out := make([]lower.Launch, 0, len(ls))
	for _, l := range ls {
		if l.Kernel != "" && re.MatchString(l.Kernel) {
			continue
		}
		out = append(out, l)
	}
	return out, len(ls) - len(out)
}

// SkippedLaunches is how many launches EnvSkipKernels has left out of the
// programs bound so far (0 when it is unset).
func (e *Executor) SkippedLaunches() int { return e.skipped }
