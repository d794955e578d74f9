package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"lagc/cuda"
)

// TestResourcesEarly works the S-2.1 decode chain's pairs by hand: an SM
// holding three blocks of 256 threads at 80 registers (15,360 of a
// sub-partition's 16,384) takes nothing more of that size; 320 such
// blocks leave 76 SMs with two, each room for one routed-down block of
// 128 threads at 160 registers (5,120 a warp).
func TestResourcesEarly(t *testing.T) {
	gemv := cuda.BlockShape{Threads: 256, Registers: 80}
	down := cuda.BlockShape{Threads: 128, Registers: 160, Shared: 22272}
	for _, c := range []struct {
		name    string
		prev    cuda.BlockShape
		gp      int
		next    cuda.BlockShape
		g, want int
	}{
		{"a GEMV after 384 GEMV blocks", gemv, 384, gemv, 320, 12},
		{"the down after 320 gate+up blocks", gemv, 320, down, 384, 76},
		{"after a two-wave launch", gemv, 1000, gemv, 384, 0},
		{"after one block", gemv, 1, gemv, 384, 384},
		{"capped by its grid", gemv, 132, gemv, 50, 50},
	} {
		got, err := early(cuda.SM90, 132, c.prev, c.gp, c.next, c.g)
		if err != nil || got != c.want {
			t.Errorf("%s: %d, err %v; want %d", c.name, got, err, c.want)
		}
	}
}

// TestPlanResources runs `lagc plan --resources` (NVRTC compiles, no GPU)
// on the S-2.1 q4_k_m plan: every decode kernel gets a row whose figures
// are consistent, the chain's pairs recur once a MoE layer, and the flags
// it cannot go with are refused.
func TestPlanResources(t *testing.T) {
	for _, args := range [][]string{{"--json"}, {"--at", "16"}, {"--cc", "80"}} {
		_, errs, code := runPlanCmd(t, append([]string{"plan", "--preset", "synthetic-tiny", "--resources"}, args...)...)
		if code == 0 || !strings.Contains(errs, "--resources") {
			t.Errorf("plan --resources %v: exit %d, stderr %q; want a refusal naming --resources", args, code, errs)
		}
	}
	if _, err := cuda.NVRTCVersion(); err != nil {
		if os.Getenv("LAGC_REQUIRE_NVRTC") == "1" {
			t.Fatalf("LAGC_REQUIRE_NVRTC=1 but NVRTC is unavailable: %v", err)
		}
		t.Skipf("no NVRTC (scripts/nvrtc-local.sh installs one): %v", err)
	}
	out, errs, code := runPlanCmd(t, "plan", "--preset", "laguna-s-2.1", "--quant", "q4_k_m", "--ctx", "4096", "--resources")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "compiling the decode step's") || !strings.Contains(out, "decode step of laguna: 341 kernel launches") {
		t.Errorf("stderr %q, output %q: want the progress line and the step's launch count", errs, out)
	}
	row := regexp.MustCompile(`^(\S.*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+ \S+\s+(\d+) \((\w+)\)\s+([\d.]+)\s+(-|(\d+) of (\d+))\s+(\d+)$`)
	kernels := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		blocks, perSM := n(2), n(5)
		if perSM < 1 || n(4) < 1 || n(4) > 255 {
			t.Errorf("%s: %d blocks an SM, %d registers", m[1], perSM, n(4))
		}
		if m[8] != "-" && (n(9) > n(10) || n(10) != blocks) {
			t.Errorf("%s: %s beside, of %d blocks", m[1], m[8], blocks)
		}
		kernels[strings.Fields(m[1])[0]] += n(11)
	}
	// Each routed-expert pair once a MoE layer (47 of S-2.1's 48), the
	// gate+up with the shared down's GEMV (sharedDownGateUp).
	for _, k := range []string{"moe_gateup_qgemv_xin_trig<bf16_t,", "moe_down_qgemv_pre<bf16_t,", "qgemv_join_norm<bf16_t,", "attn_decode<bf16_t,", "argmax_final"} {
		if kernels[k] == 0 {
			t.Errorf("no row for %s in:\n%s", k, out)
		}
	}
	if g, d, j := kernels["moe_gateup_qgemv_xin_trig<bf16_t,"], kernels["moe_down_qgemv_pre<bf16_t,"], kernels["qgemv_join_norm<bf16_t,"]; g != 47 || d != 47 || j != 47 {
		t.Errorf("routed gate+up %d times, down %d, join %d; want 47 each", g, d, j)
	}
}
