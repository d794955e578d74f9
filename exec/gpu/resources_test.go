package gpu

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/ir"
	"lagc/lower"
)

// decodeKernels is one launch of each kernel of the S-2.1 q4_k_m decode
// step.
func decodeKernels(t *testing.T) []lower.Launch {
	p := tracePlan(t, traceModelNamed(t, "laguna-s-2.1-q4_k_m"), ir.BF16)
	seen := map[string]bool{}
	var out []lower.Launch
	for _, st := range p.Decode.Steps {
		for _, l := range st.Launches {
			if l.Kernel == lower.Memcpy || l.File == "" || seen[l.NameExpr()] {
				continue
			}
			seen[l.NameExpr()] = true
			out = append(out, l)
		}
	}
	if len(out) < 5 {
		t.Fatalf("%d kernels in the decode step; it has more", len(out))
	}
	return out
}

// TestLaunchResources reads the resources of every kernel of the S-2.1
// q4_k_m decode step from its cubin and checks them against ptxas's own
// -v report of the same compile: the registers it states, and a shared
// memory section of its "bytes smem" plus the 1 KiB reserve (none where it
// states none), which SMLimits.Shape relies on. NVRTC 13 (the H200's)
// returned no report where 12.4 does; there TestLaunchResourcesGPU checks
// against the driver instead.
func TestLaunchResources(t *testing.T) {
	needNVRTC(t)
	used := regexp.MustCompile(`Compiling entry function '([^']+)'[\s\S]*?Used (\d+) registers([^\n]*)`)
	smem := regexp.MustCompile(`(\d+) bytes smem`)
	for _, l := range decodeKernels(t) {
		r, err := LaunchResources(l, "sm_90a")
		if err != nil {
			t.Errorf("%s: %v", l.NameExpr(), err)
			continue
		}
		c, err := compileSpec(l) // the same compile with ptxas's report
		if err != nil {
			t.Fatalf("%s: %v", l.NameExpr(), err)
		}
		if !strings.Contains(c.Log, "registers") {
			ver, _ := cuda.NVRTCVersion()
			t.Logf("%s: NVRTC %s gave no ptxas report; read %+v", l.NameExpr(), ver, r)
			continue
		}
		m := used.FindStringSubmatch(c.Log)
		if m == nil || m[1] != c.Lowered {
			t.Fatalf("%s: no register report for %s in ptxas's log:\n%s", l.NameExpr(), c.Lowered, c.Log)
		}
		if regs, _ := strconv.Atoi(m[2]); r.Registers != regs {
			t.Errorf("%s: %d registers read from the cubin, ptxas reports %d", l.NameExpr(), r.Registers, regs)
		}
		want := 0
		if sm := smem.FindStringSubmatch(m[3]); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			want = n + cuda.SM90.SharedReserved
		}
		if r.SharedSection != want {
			t.Errorf("%s: a shared section of %d bytes, want %d (ptxas:%s)", l.NameExpr(), r.SharedSection, want, m[3])
		}
		t.Logf("%s: %d registers, frame %d bytes, shared section %d bytes", l.NameExpr(), r.Registers, r.FrameBytes, r.SharedSection)
	}
}

// TestLaunchResourcesGPU: what LaunchResources reads from the cubin is what
// the driver reports for the same kernel loaded (cuFuncGetAttribute): its
// registers, its static shared memory as SMLimits.Shape counts it (the
// section less the block reserve), and its local memory as the frame.
func TestLaunchResourcesGPU(t *testing.T) {
	k, _ := hopperGPU(t)
	for _, l := range decodeKernels(t) {
		r, err := LaunchResources(l, "sm_90a")
		if err != nil {
			t.Fatalf("%s: %v", l.NameExpr(), err)
		}
		kn, err := k.Kernel(l)
		if err != nil {
			t.Fatalf("%s: %v", l.NameExpr(), err)
		}
		a, err := kn.Attrs()
		if err != nil {
			t.Fatalf("%s: %v", l.NameExpr(), err)
		}
		shared := max(r.SharedSection-cuda.SM90.SharedReserved, 0)
		if a.Registers != r.Registers || a.StaticShared != shared || a.LocalBytes != r.FrameBytes {
			t.Errorf("%s: the driver reports %d registers, %d bytes of static shared memory, %d of local; the cubin read %+v (static %d)",
				l.NameExpr(), a.Registers, a.StaticShared, a.LocalBytes, r, shared)
		}
	}
}

// TestMinBForceQGEMV: -DLAGC_MINB_FORCE=m through LAGC_NVRTC_OPTIONS
// reaches the plain quantised GEMV, whose launch bounds ask no minimum by
// default (LAGC_MINB(0)): asked for six blocks an SM, its registers fit
// six (at most 40 a thread), where without it they do not.
func TestMinBForceQGEMV(t *testing.T) {
	needNVRTC(t)
	var q *lower.Launch
	for _, l := range decodeKernels(t) {
		if l.Kernel == "qgemv" {
			q = &l
			break
		}
	}
	if q == nil {
		t.Fatal("no qgemv launch in the S-2.1 q4_k_m decode step")
	}
	t.Setenv(EnvNVRTCOptions, "")
	base, err := LaunchResources(*q, "sm_90a")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvNVRTCOptions, "^qgemv$:-DLAGC_MINB_FORCE=6")
	forced, err := LaunchResources(*q, "sm_90a")
	if err != nil {
		t.Fatal(err)
	}
	if base.Registers <= 40 || forced.Registers > 40 {
		t.Errorf("%s: %d registers as is, %d asked for six blocks an SM; want more than 40, then at most 40",
			q.NameExpr(), base.Registers, forced.Registers)
	}
}

// TestQGEMVWPreCompiles: -DLAGC_QGEMV_WAIT_FIRST (through
// LAGC_NVRTC_OPTIONS: qgemv's form before its first weights were asked for
// ahead of the launch's wait, for A/B runs) reaches the quantised GEMV of
// every instantiation the S-2.1 q4_k_m decode step launches, and compiles:
// its cubin differs from the default's where a macro the kernels never
// read leaves it byte for byte the same. The registers of each form are
// logged (at NVRTC 12.4 the q, k, v, gate GEMV keeps 64 in both).
func TestQGEMVWPreCompiles(t *testing.T) {
	needNVRTC(t)
	t.Setenv(EnvNVRTCOptions, "")
	n := 0
	for _, l := range decodeKernels(t) {
		if l.Kernel != "qgemv" {
			continue
		}
		n++
		base, err := compileLaunch(l, "sm_90a")
		if err != nil {
			t.Fatal(err)
		}
		unread, err := compileLaunch(l, "sm_90a", "-DLAGC_NO_KERNEL_READS_THIS")
		if err != nil {
			t.Fatal(err)
		}
		first, err := compileLaunch(l, "sm_90a", "-DLAGC_QGEMV_WAIT_FIRST")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(base.Cubin, unread.Cubin) {
			t.Fatalf("%s: a macro no kernel reads changed the cubin: the comparison below would prove nothing", l.NameExpr())
		}
		if bytes.Equal(base.Cubin, first.Cubin) {
			t.Errorf("%s: -DLAGC_QGEMV_WAIT_FIRST left the cubin as it was", l.NameExpr())
		}
		rb, err := cuda.CubinKernelResources(base.Cubin, base.Lowered)
		if err != nil {
			t.Fatal(err)
		}
		rf, err := cuda.CubinKernelResources(first.Cubin, first.Lowered)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d registers (frame %d B), %d (frame %d B) waiting first", l.NameExpr(), rb.Registers, rb.FrameBytes, rf.Registers, rf.FrameBytes)
	}
	if n == 0 {
		t.Fatal("no qgemv launch in the S-2.1 q4_k_m decode step")
	}
}

// TestQGEMVWeightsOnlyBeforeWait: qgemv reads its weight matrix before its
// launch's wait (cuda's TestKernelsWaitFirst exempts it for that), which is
// safe only where no launch writes it: in every trace model's plan (both
// dtypes; decode, prefill at several lengths and batched steps) each qgemv
// launch's matrix lies in the uploaded weights.
func TestQGEMVWeightsOnlyBeforeWait(t *testing.T) {
	n := 0
	eachPlanStep(t, []int{0, 1, 5, 37}, func(model string, _ int, all [][]lower.Launch) {
		for _, ls := range all {
			for _, l := range ls {
				if l.Kernel != "qgemv" {
					continue
				}
				n++
				const w = 4 // qgemv(N, K, rows, row0, w, ...): lower.QGEMV's argument order
				if len(l.Args) <= w || l.Args[w].Kind != lower.ArgPtr || l.Args[w].Base != lower.BaseWeights {
					t.Fatalf("%s: %s's matrix (argument %d of %v) is not in the weights", model, l.NameExpr(), w, l.Args)
				}
			}
		}
	})
	if n == 0 {
		t.Fatal("no qgemv launch in any trace model's plan")
	}
	t.Logf("%d qgemv launches, every matrix in the weights", n)
}
