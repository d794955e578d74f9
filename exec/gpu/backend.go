package gpu

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"lagc/cuda"
	"lagc/ir"
	"lagc/lower"
)

// Config says how to compile a model graph for the GPU and run it.
type Config struct {
	DType ir.DType // activations and matmul weights: ir.BF16 (default) or ir.F32
	Chunk int      // prefill tokens per step (default lower.DefaultChunk)
	// AutoChunk with Chunk 0: steps of lower.LongChunk where the context
	// holds more than lower.DefaultChunk and that plan fits the device's
	// free memory, else lower.DefaultChunk (lagc run).
	AutoChunk  bool
	MaxContext int // KV cache positions
	Seqs       int // sequence slots for batched steps (default 1)
	// BatchGEMM: batched decode steps above 8 rows run the GEMMs
	// (lower.Options.BatchGEMM; also LAGC_BATCH_GEMM=1).
	BatchGEMM bool
	Options
}

// PlanOptions are the lowering options Compile uses for a device of sms
// multiprocessors and compute capability cc (major*10+minor;
// LAGC_PREFILL_ATTN=ffma, tc, wg64, wg128 or wg128x2, LAGC_SPLIT_GEMM=0, LAGC_FLOAT_SPLIT_GEMV=0, LAGC_PREFILL_BF16=0, LAGC_PREFILL_GEMM=mma, LAGC_CUBLASLT=0,
// LAGC_QMOE_SHAPE, LAGC_DISABLE_FUSIONS, LAGC_QGEMV_GROUPS,
// LAGC_DECODE_SPLITS, LAGC_DECODE_STAGES and LAGC_DECODE_MMA included), so that a plan made without the device is
// the one the executor would run on this machine.
func PlanOptions(c Config, sms, cc int) (lower.Options, error) {
	if _, err := prefillAttnFromEnv(); err != nil {
		return lower.Options{}, err
	}
	qmoe, err := lower.ParseQMoEForce(os.Getenv("LAGC_QMOE_SHAPE"))
	if err != nil {
		return lower.Options{}, fmt.Errorf("LAGC_QMOE_SHAPE: %w", err)
	}
	groups, err := envInt("LAGC_QGEMV_GROUPS", math.MaxInt, "a positive number of warp groups")
	if err != nil {
		return lower.Options{}, err
	}
	splits, err := envInt("LAGC_DECODE_SPLITS", lower.MaxSplits, fmt.Sprintf("1 to %d blocks per kv head", lower.MaxSplits))
	if err != nil {
		return lower.Options{}, err
	}
	stages, err := envInt("LAGC_DECODE_STAGES", lower.MaxDecodeStages, fmt.Sprintf("1 (no tile ring) to %d tiles in flight", lower.MaxDecodeStages))
	if err != nil {
		return lower.Options{}, err
	}
	mma := 0
	switch v := os.Getenv("LAGC_DECODE_MMA"); v {
	case "":
	case "0":
		mma = 1
	case "1":
		mma = 2
	default:
		return lower.Options{}, fmt.Errorf("LAGC_DECODE_MMA=%q: expected 0 (the decode attention's key loop on FFMA) or 1 (on tensor cores where it can run)", v)
	}
	return lower.Options{DType: c.DType, Chunk: c.Chunk, MaxContext: c.MaxContext, SMs: sms, CC: cc, Seqs: c.Seqs,
		BatchGEMM:   c.BatchGEMM || os.Getenv("LAGC_BATCH_GEMM") == "1",
		PrefillFFMA: PrefillFFMA(), PrefillAttnTC: !prefillWG, PrefillAttnRows: prefillWGRows, PrefillAttnStages: prefillWGStages, DisableSplitGEMM: os.Getenv("LAGC_SPLIT_GEMM") == "0", DisableFloatSplitGEMV: os.Getenv("LAGC_FLOAT_SPLIT_GEMV") == "0",
		PrefillMMA:  os.Getenv("LAGC_PREFILL_GEMM") == "mma",
		PrefillBF16: os.Getenv(EnvPrefillBF16) != "0",
		CublasLt:    UseCublasLt(cc), QMoE: qmoe, DisableFusions: fusionList("LAGC_DISABLE_FUSIONS"), EnableFusions: fusionList("LAGC_ENABLE_FUSIONS"),
		QGEMVGroups: groups, DecodeSplits: splits, DecodeStages: stages, DecodeMMA: mma}, nil
}

// envInt is the environment variable name as a number from 1 to max, or 0
// when it is unset; anything else is an error saying what was expected.
func envInt(name string, max int, expected string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, fmt.Errorf("%s=%q: expected %s", name, v, expected)
	}
	return n, nil
}

// fusionList is environment variable env (LAGC_DISABLE_FUSIONS,
// LAGC_ENABLE_FUSIONS), comma-separated launch-stream fusion names
// (lower.FusionNames; lower rejects unknown ones).
func fusionList(env string) []string {
	var out []string
	for _, f := range strings.Split(os.Getenv(env), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// UseCublasLt says whether plans for compute capability cc put the plain
// bf16 prefill GEMMs on cuBLASLt: on Hopper where the library loads
// (cuda.HaveCublasLt), unless LAGC_CUBLASLT=0. Without it lagc's own
// wgmma GEMMs run them, as before.
func UseCublasLt(cc int) bool {
	return cc >= 90 && os.Getenv(EnvCublasLt) != "0" && cuda.HaveCublasLt()
}

// Compile lowers g (optimised, weights bound to the checkpoint's dtypes)
// for the device and starts an executor with the weights of ws (nil:
// synthetic). The executor satisfies engine.Backend.
func Compile(g *ir.Graph, ws WeightSource, c Config) (*Executor, error) {
	dev, own := c.Device, false
	if dev == nil {
		d, err := cuda.Open(0)
		if err != nil {
			return nil, err
		}
		dev, own = d, true
	}
	opts, err := PlanOptions(c, dev.Props().SMs, dev.Props().Major*10+dev.Props().Minor)
	var plan *lower.Plan
	opts.Chunk = autoChunk(c)
	if err == nil {
		plan, err = lower.Lower(g, opts)
	}
	var shortened string
	if err == nil && opts.Chunk != c.Chunk {
		if free, _, merr := dev.MemInfo(); merr == nil {
			if shortened = longChunkNote(plan, free); shortened != "" {
				opts.Chunk = lower.DefaultChunk
				plan, err = lower.Lower(g, opts)
			}
		}
	}
	var dropped string
	if err == nil && plan.ShadowBytes > 0 && os.Getenv(EnvPrefillBF16) == "" {
		if dropped = shadowsDontFit(dev, plan); dropped != "" {
			opts.PrefillBF16 = false
			plan, err = lower.Lower(g, opts)
		}
	}
	if err != nil {
		if own {
			dev.Close()
		}
		return nil, err
	}
	o := c.Options
	o.Device = dev
	e, err := New(plan, ws, o)
	if err != nil {
		if own {
			dev.Close()
		}
		return nil, fmt.Errorf("gpu: %w", err)
	}
	e.ownDev = own
	e.shadowsDropped = dropped
	if shortened != "" && o.LoadLog != nil {
		fmt.Fprintf(o.LoadLog, "note: %s\n", shortened)
	}
	if dropped != "" && o.LoadLog != nil {
		fmt.Fprintf(o.LoadLog, "note: %s\n", dropped)
	}
	return e, nil
}

// shadowHeadroom is device memory left free beside a plan with bf16
// weight copies: the CUDA context, modules, graphs and cuBLASLt's
// workspace take some, and a KV cache or a batch grown later more.
const shadowHeadroom = 2 << 30

// shadowsDontFit says why plan's bf16 weight copies should be left out on
// dev, or "" where they fit or its free memory is unknown.
func shadowsDontFit(dev *cuda.Device, plan *lower.Plan) string {
	free, _, err := dev.MemInfo()
	if err != nil {
		return ""
	}
	return shadowsNote(plan, free)
}

// shadowsNote says why plan's bf16 weight copies do not fit in free bytes
// of device memory (short of what the plan allocates plus
// shadowHeadroom), or "" where they do.
func shadowsNote(plan *lower.Plan, free uint64) string {
	need := plan.DeviceBytes()
	if uint64(need+shadowHeadroom) <= free {
		return ""
	}
	return fmt.Sprintf("prefill reads the quantised weights: %s of bf16 copies would not fit (the plan with them needs %s and %s of headroom, %s free; %s=1 insists)",
		lower.FormatBytes(plan.ShadowBytes), lower.FormatBytes(need), lower.FormatBytes(shadowHeadroom), lower.FormatBytes(int64(free)), EnvPrefillBF16)
}

// autoChunk is the prefill step Compile tries first: lower.LongChunk with
// AutoChunk, no chunk given and room in the context for a prompt longer
// than lower.DefaultChunk; else c.Chunk (0: lower's default).
func autoChunk(c Config) int {
	if c.AutoChunk && c.Chunk == 0 && c.MaxContext > lower.DefaultChunk {
		return lower.LongChunk
	}
	return c.Chunk
}

// longChunkNote says why plan (in steps of lower.LongChunk) does not fit
// in free bytes of device memory with shadowHeadroom to spare, or "" where
// it does.
func longChunkNote(plan *lower.Plan, free uint64) string {
	need := plan.DeviceBytes()
	if uint64(need+shadowHeadroom) <= free {
		return ""
	}
	return fmt.Sprintf("prefill runs in steps of %d tokens: steps of %d need %s and %s of headroom, %s free (--chunk sets the step)",
		lower.DefaultChunk, lower.LongChunk, lower.FormatBytes(need), lower.FormatBytes(shadowHeadroom), lower.FormatBytes(int64(free)))
}

// PrefillChunk is the plan's prefill step: the most tokens one prefill
// launch sequence takes (longer prompts run in steps of it).
func (e *Executor) PrefillChunk() int { return e.plan.Prefill.Tokens }

// ShadowsDropped says why Compile left the bf16 weight copies for prefill
// out (no room on the device), or "" where it did not.
func (e *Executor) ShadowsDropped() string { return e.shadowsDropped }
