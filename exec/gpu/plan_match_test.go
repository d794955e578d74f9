package gpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/lower"
)

// plannedText is what the plan says a run of schedule s at T tokens
// launches: its steps' launches at T (Plan.At), then Finish.
func plannedText(t testing.TB, p *lower.Plan, s *lower.Schedule, T int) []string {
	t.Helper()
	steps, err := p.At(s, T)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ls := range append(steps, s.Finish) {
		for _, l := range ls {
			out = append(out, l.String())
		}
	}
	return out
}

// launchedText is what rec recorded the executor launching (kernels and
// device copies; uploads and downloads are the executor's own).
func launchedText(ex *Executor, rec *Recorder) []string {
	var out []string
	for _, ev := range rec.Events {
		if ev.Kind == "launch" || ev.Kind == "memcpy" {
			out = append(out, ex.Format(ev))
		}
	}
	return out
}

// checkLaunches runs f with rec reset and fails unless the executor
// launched exactly what the plan says schedule s launches at T tokens.
func checkLaunches(t *testing.T, what string, ex *Executor, rec *Recorder, s *lower.Schedule, T int, f func() error) {
	t.Helper()
	rec.Reset()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	got, want := launchedText(ex, rec), plannedText(t, ex.Plan(), s, T)
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Fatalf("%s: %d launches, the plan has %d; %s", what, len(got), len(want), firstDiff(g, w))
	}
}

// planRuns drives ex through a full prefill chunk, a ragged one, a short
// one after a reset and a decode step, checking each against the plan.
func planRuns(t *testing.T, ex *Executor, rec *Recorder) {
	p := ex.Plan()
	toks := make([]int32, p.Prefill.Tokens)
	for i := range toks {
		toks[i] = int32(1 + i%5)
	}
	prefill := func(n int) func() error {
		return func() error { _, err := ex.Prefill(toks[:n]); return err }
	}
	for _, T := range []int{p.Prefill.Tokens, traceRagged, traceShort} {
		ex.Reset()
		checkLaunches(t, fmt.Sprintf("prefill T=%d", T), ex, rec, p.Prefill, T, prefill(T))
	}
	checkLaunches(t, "decode", ex, rec, p.Decode, 1, func() error { _, err := ex.DecodeNext(1); return err })
}

// TestDryRunIsThePlan: for every trace model, in bf16 and f32, the
// executor launches exactly the plan's launches (decode, a full prefill
// chunk, a ragged and a short one), recorded without a GPU.
func TestDryRunIsThePlan(t *testing.T) {
	for _, m := range traceModels {
		for _, dt := range []ir.DType{ir.BF16, ir.F32} {
			t.Run(m.name+"-"+dt.String(), func(t *testing.T) {
				ex, rec, err := DryRun(tracePlan(t, m, dt))
				if err != nil {
					t.Fatal(err)
				}
				defer ex.Close()
				planRuns(t, ex, rec)
			})
		}
	}
}

// TestDryRunCublasLt: with prefill GEMMs on cuBLASLt (S-2.1 and its
// q4_k_m recipe, whose bf16 copies go there too) the executor binds and
// records the cuBLASLt launches where the plan has them, printed as the
// plan prints them, without a GPU or the library.
func TestDryRunCublasLt(t *testing.T) {
	for _, m := range traceModels[:3] {
		if m.layers == 0 || m.name == "laguna-xs-2" {
			continue
		}
		m.cublasLt = true
		t.Run(m.name, func(t *testing.T) {
			ex, rec, err := DryRun(tracePlan(t, m, ir.BF16))
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			planRuns(t, ex, rec)
			n := 0
			for _, st := range ex.Plan().Prefill.Steps {
				for _, l := range st.Launches {
					if l.Kernel == lower.CublasLtGEMM {
						n++
					}
				}
			}
			if n == 0 {
				t.Fatalf("no cuBLASLt launch in the %d-token prefill plan", ex.Plan().Prefill.Tokens)
			}
		})
	}
}

// TestExecutorIsThePlanGPU is TestDryRunIsThePlan on the GPU: the real
// executor's launches, recorded on their way to its stream (the
// S-2.1 and XS-2 layers in bf16 only: f32 doubles their 20 GB).
func TestExecutorIsThePlanGPU(t *testing.T) {
	k, _ := gpu(t)
	// One decode step: greedy decoding one step ahead would queue a
	// second step of the same launches (TestDecodeAheadGPU checks it).
	t.Setenv(EnvDecodeAhead, "0")
	for _, m := range traceModels {
		for _, dt := range []ir.DType{ir.BF16, ir.F32} {
			if m.layers > 0 && dt == ir.F32 {
				continue
			}
			t.Run(m.name+"-"+dt.String(), func(t *testing.T) {
				ex, err := New(tracePlanSMs(t, m, dt, k.SMs()), nil, Options{Device: k.Dev, Eager: true})
				if err != nil {
					t.Fatal(err)
				}
				defer ex.Close()
				rec := &Recorder{Next: ex.s}
				ex.q = rec
				planRuns(t, ex, rec)
			})
		}
	}
}

// TestDisableFusionsEnv: LAGC_DISABLE_FUSIONS (and LAGC_ENABLE_FUSIONS)
// reach the plan options
// (lagc plan and the executor plan with PlanOptions; lower checks the
// names, TestDisableFusions).
func TestDisableFusionsEnv(t *testing.T) {
	t.Setenv("LAGC_DISABLE_FUSIONS", " fuseAddNorm, fuseGEMVNorm,")
	o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90)
	if err != nil || !slices.Equal(o.DisableFusions, []string{"fuseAddNorm", "fuseGEMVNorm"}) {
		t.Fatalf("options %v, %v", o.DisableFusions, err)
	}
	t.Setenv("LAGC_DISABLE_FUSIONS", "")
	if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || o.DisableFusions != nil {
		t.Fatalf("options %v with the variable empty, %v", o.DisableFusions, err)
	}
	t.Setenv("LAGC_ENABLE_FUSIONS", "fuseTopKShared")
	if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || !slices.Equal(o.EnableFusions, []string{"fuseTopKShared"}) {
		t.Fatalf("LAGC_ENABLE_FUSIONS: options %v, %v", o.EnableFusions, err)
	}
}

// TestFloatSplitGEMVEnv: a float model's batched q, k, v and gate run as
// one gemv_split by default (measured faster on the H200, 2026-12-04);
// LAGC_FLOAT_SPLIT_GEMV=0 runs four GEMVs.
func TestFloatSplitGEMVEnv(t *testing.T) {
	for _, c := range []struct {
		env  string
		want bool
	}{{"", true}, {"1", true}, {"0", false}} {
		t.Setenv("LAGC_FLOAT_SPLIT_GEMV", c.env)
		if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || o.DisableFloatSplitGEMV == c.want {
			t.Errorf("LAGC_FLOAT_SPLIT_GEMV=%q: DisableFloatSplitGEMV %v (want %v), %v", c.env, o.DisableFloatSplitGEMV, !c.want, err)
		}
	}
}

// TestDryRunTail: PrefillTail and ForwardTail launch what lower.AtTail
// plans (a full chunk without its tail, then the ragged last chunk with its
// tail on its last row; a short prompt in one chunk), recorded without a
// GPU, for every trace model.
func TestDryRunTail(t *testing.T) {
	for _, m := range traceModels {
		t.Run(m.name, func(t *testing.T) {
			p := tracePlan(t, m, ir.BF16)
			ex, rec, err := DryRun(p)
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			toks := make([]int32, p.Prefill.Tokens+traceRagged)
			for i := range toks {
				toks[i] = int32(1 + i%5)
			}
			planned := func(parts ...struct {
				T    int
				tail lower.Tail
			}) []string {
				var out []string
				for _, c := range parts {
					steps, err := p.AtTail(p.Prefill, c.T, c.tail)
					if err != nil {
						t.Fatal(err)
					}
					for _, ls := range append(steps, p.Prefill.Finish) {
						for _, l := range ls {
							out = append(out, l.String())
						}
					}
				}
				return out
			}
			type part = struct {
				T    int
				tail lower.Tail
			}
			for _, c := range []struct {
				what string
				run  func() error
				want []string
			}{
				{"PrefillTail, two chunks", func() error { _, err := ex.PrefillTail(toks); return err },
					planned(part{p.Prefill.Tokens, lower.TailNone}, part{traceRagged, lower.TailLast})},
				{"ForwardTail, one chunk", func() error { _, _, err := ex.ForwardTail(toks[:traceShort]); return err },
					planned(part{traceShort, lower.TailLast})},
			} {
				ex.Reset()
				rec.Reset()
				if err := c.run(); err != nil {
					t.Fatalf("%s: %v", c.what, err)
				}
				if g, w := strings.Join(launchedText(ex, rec), "\n"), strings.Join(c.want, "\n"); g != w {
					t.Fatalf("%s: %s", c.what, firstDiff(g, w))
				}
			}
		})
	}
}

// TestQGEMVGroupsEnv: LAGC_QGEMV_GROUPS reaches the plan options; a value
// that is not a positive number is an error naming the variable.
func TestQGEMVGroupsEnv(t *testing.T) {
	t.Setenv("LAGC_QGEMV_GROUPS", "2048")
	if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || o.QGEMVGroups != 2048 {
		t.Fatalf("options %d, %v", o.QGEMVGroups, err)
	}
	for _, v := range []string{"x", "0", "-5"} {
		t.Setenv("LAGC_QGEMV_GROUPS", v)
		if _, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err == nil || !strings.Contains(err.Error(), "LAGC_QGEMV_GROUPS") {
			t.Errorf("%q: %v", v, err)
		}
	}
}

// TestDecodeSplitsEnv: LAGC_DECODE_SPLITS reaches the plan options; a
// value outside 1 to lower.MaxSplits is an error naming the variable.
func TestDecodeSplitsEnv(t *testing.T) {
	t.Setenv("LAGC_DECODE_SPLITS", "8")
	if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || o.DecodeSplits != 8 {
		t.Fatalf("options %d, %v", o.DecodeSplits, err)
	}
	for _, v := range []string{"x", "0", "-5", "4097"} {
		t.Setenv("LAGC_DECODE_SPLITS", v)
		if _, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err == nil || !strings.Contains(err.Error(), "LAGC_DECODE_SPLITS") {
			t.Errorf("%q: %v", v, err)
		}
	}
}

// TestDecodeKeyLoopEnv: LAGC_DECODE_STAGES (1 to lower.MaxDecodeStages)
// and LAGC_DECODE_MMA (0 or 1) reach the plan options as lower's forcings;
// anything else is an error naming the variable.
func TestDecodeKeyLoopEnv(t *testing.T) {
	for _, c := range []struct {
		stages, mma         string
		wantStages, wantMMA int
	}{{"", "", 0, 0}, {"1", "0", 1, 1}, {"8", "1", 8, 2}, {"3", "", 3, 0}} {
		t.Setenv("LAGC_DECODE_STAGES", c.stages)
		t.Setenv("LAGC_DECODE_MMA", c.mma)
		o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90)
		if err != nil || o.DecodeStages != c.wantStages || o.DecodeMMA != c.wantMMA {
			t.Errorf("LAGC_DECODE_STAGES=%q LAGC_DECODE_MMA=%q: options %d, %d, %v", c.stages, c.mma, o.DecodeStages, o.DecodeMMA, err)
		}
	}
	for _, c := range []struct{ key, val string }{{"LAGC_DECODE_STAGES", "0"}, {"LAGC_DECODE_STAGES", "9"}, {"LAGC_DECODE_STAGES", "x"},
		{"LAGC_DECODE_MMA", "2"}, {"LAGC_DECODE_MMA", "on"}} {
		t.Setenv("LAGC_DECODE_STAGES", "")
		t.Setenv("LAGC_DECODE_MMA", "")
		t.Setenv(c.key, c.val)
		if _, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s=%q: %v", c.key, c.val, err)
		}
	}
}

// TestChunkTail: a prompt's chunks run their tail on every row, or with
// only the last row wanted, on the last chunk's last row and not at all
// in the others.
func TestChunkTail(t *testing.T) {
	for _, c := range []struct {
		lastOnly, last bool
		want           lower.Tail
	}{{false, false, lower.TailAll}, {false, true, lower.TailAll}, {true, false, lower.TailNone}, {true, true, lower.TailLast}} {
		if got := chunkTail(c.lastOnly, c.last); got != c.want {
			t.Errorf("chunkTail(%v, %v) = %d, want %d", c.lastOnly, c.last, got, c.want)
		}
	}
}

// TestPrefillAttnEnv: LAGC_PREFILL_ATTN takes wgmma, wg64, wg128, wg128x2,
// tc or ffma; anything else (the removed warp-specialised ws3 too) is an
// error naming the variable (a typo must not time the wrong kernel
// silently). wg128x2's rows and stages reach the plan's options.
func TestPrefillAttnEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		ok   bool
		mode prefillAttnMode // what the package's variables start from
	}{{"", true, prefillAttnMode{}}, {"wgmma", true, prefillAttnMode{}}, {"wg64", true, prefillAttnMode{rows: 64}},
		{"wg128", true, prefillAttnMode{rows: 128}}, {"wg128x2", true, prefillAttnMode{rows: 128, stages: 2}},
		{"tc", true, prefillAttnMode{tc: true}}, {"ffma", true, prefillAttnMode{ffma: true}},
		{"wgma", false, prefillAttnMode{}}, {"TC", false, prefillAttnMode{}}, {"wg128x3", false, prefillAttnMode{}},
		{"ws3", false, prefillAttnMode{}}} {
		t.Setenv("LAGC_PREFILL_ATTN", c.v)
		_, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "LAGC_PREFILL_ATTN")) {
			t.Errorf("%q: %v", c.v, err)
		}
		if m, err := prefillAttnFromEnv(); m != c.mode || (err == nil) != c.ok {
			t.Errorf("%q: mode %+v, %v; want %+v", c.v, m, err, c.mode)
		}
		if err != nil {
			for _, m := range prefillAttnModes { // the error names every value taken
				if !strings.Contains(err.Error(), m.name) {
					t.Errorf("%q: %v does not name %s", c.v, err, m.name)
				}
			}
		}
	}
	t.Setenv("LAGC_PREFILL_ATTN", "wg128x2")
	defer wgVariant{rows: 128, stages: 2}.use()()
	if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || o.PrefillAttnRows != 128 || o.PrefillAttnStages != 2 {
		t.Errorf("wg128x2: PrefillAttnRows %d, PrefillAttnStages %d, %v", o.PrefillAttnRows, o.PrefillAttnStages, err)
	}
}

// TestPrefillBF16Env: plans keep bf16 copies of quantised prefill weights
// unless LAGC_PREFILL_BF16=0; unset, Compile leaves them out where the
// device lacks room (shadowsNote: the plan's bytes and 2 GiB beside them),
// and the note says how much was needed and free.
func TestPrefillBF16Env(t *testing.T) {
	for _, c := range []struct {
		env  string
		want bool
	}{{"", true}, {"1", true}, {"0", false}} {
		t.Setenv(EnvPrefillBF16, c.env)
		if o, err := PlanOptions(Config{DType: ir.BF16, MaxContext: 256}, 132, 90); err != nil || o.PrefillBF16 != c.want {
			t.Errorf("%s=%q: PrefillBF16 %v, %v; want %v", EnvPrefillBF16, c.env, o.PrefillBF16, err, c.want)
		}
	}
	p := tracePlan(t, traceModels[slices.IndexFunc(traceModels, func(m traceModel) bool { return m.prefillBF16 })], ir.BF16)
	if p.ShadowBytes <= 0 {
		t.Fatal("the copies trace model plans no copies")
	}
	need := uint64(p.DeviceBytes() + shadowHeadroom)
	if got := shadowsNote(p, need); got != "" {
		t.Errorf("with %d bytes free (exactly enough): %q", need, got)
	}
	got := shadowsNote(p, need-1)
	for _, want := range []string{lower.FormatBytes(p.ShadowBytes), lower.FormatBytes(p.DeviceBytes()), lower.FormatBytes(int64(need - 1)), EnvPrefillBF16} {
		if !strings.Contains(got, want) {
			t.Errorf("one byte short: %q does not say %q", got, want)
		}
	}
}

// TestAutoChunk: Compile tries steps of lower.LongChunk only with
// AutoChunk, no chunk given and a context longer than lower.DefaultChunk.
func TestAutoChunk(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{AutoChunk: true, MaxContext: 8192}, lower.LongChunk},
		{Config{AutoChunk: true, MaxContext: lower.DefaultChunk + 1}, lower.LongChunk},
		{Config{AutoChunk: true, MaxContext: lower.DefaultChunk}, 0},
		{Config{AutoChunk: true, MaxContext: 64}, 0},
		{Config{AutoChunk: true, Chunk: 16, MaxContext: 8192}, 16},
		{Config{MaxContext: 8192}, 0},
	} {
		if got := autoChunk(c.cfg); got != c.want {
			t.Errorf("%+v: %d, want %d", c.cfg, got, c.want)
		}
	}
}

// TestLongChunkNote: with AutoChunk, Compile keeps steps of
// lower.LongChunk only where that plan and 2 GiB beside it fit the free
// memory (longChunkNote), and the note says the step taken, what was
// needed and what was free.
func TestLongChunkNote(t *testing.T) {
	p := tracePlan(t, traceModels[0], ir.BF16)
	need := uint64(p.DeviceBytes() + shadowHeadroom)
	if got := longChunkNote(p, need); got != "" {
		t.Errorf("with %d bytes free (exactly enough): %q", need, got)
	}
	got := longChunkNote(p, need-1)
	for _, want := range []string{fmt.Sprint(lower.DefaultChunk), fmt.Sprint(lower.LongChunk), lower.FormatBytes(p.DeviceBytes()),
		lower.FormatBytes(int64(need - 1)), "--chunk"} {
		if !strings.Contains(got, want) {
			t.Errorf("one byte short: %q does not say %q", got, want)
		}
	}
}
