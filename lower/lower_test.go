package lower

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"lagc/config"
	"lagc/ir"
	"lagc/models"
	"lagc/passes"
)

// unfused is the pipeline without fusion passes: one kernel per YAML op.
var unfused = []string{"shapes", "cse", "dce", "memplan"}

// tinyGraph builds the synthetic-tiny preset with checkpoint-like f32 weights
// (the router bias is f32 in the YAML) and runs the pipeline (nil: the
// default one, with whatever fusions it has).
func tinyGraph(t testing.TB, pipeline ...string) *ir.Graph {
	t.Helper()
	g, err := models.Build("laguna.yaml", models.LagunaYAML, config.Tiny(), models.BuildOptions{WeightDType: ir.F32})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := passes.Run(g, passes.Options{Passes: pipeline}); err != nil {
		t.Fatal(err)
	}
	return g
}

func kernels(st Step) string {
	var ks []string
	for _, l := range st.Launches {
		ks = append(ks, l.Kernel)
	}
	return strings.Join(ks, "+")
}

// TestLowerTiny checks both shape classes of the tiny model in both modes:
// kernel choice per op, operand dtypes, arena bounds, no step reading and
// writing overlapping bytes, the KV caches and the weight table.
func TestLowerTiny(t *testing.T) {
	cfg := config.Tiny()
	for _, c := range []struct {
		dt        ir.DType
		chunk     int
		cc        int
		matmulPre string // kernel of a prefill projection
	}{
		{ir.BF16, 64, 0, "gemm_wgmma"}, // the default target, an H200
		{ir.BF16, 64, 80, "gemm_bf16"}, // before Hopper: mma.sync
		{ir.F32, 64, 0, "gemm_simple"},
		{ir.BF16, 7, 0, "gemv"}, // chunks of at most 8 rows stay on the GEMV
	} {
		t.Run(fmt.Sprintf("%s/chunk%d/cc%d", c.dt, c.chunk, c.cc), func(t *testing.T) {
			g := tinyGraph(t, unfused...)
			p, err := Lower(g, Options{DType: c.dt, Chunk: c.chunk, MaxContext: 100, CC: c.cc})
			if err != nil {
				t.Fatal(err)
			}
			act := c.dt.String()
			if p.Decode.Tokens != 1 || p.Prefill.Tokens != c.chunk || p.DType != act {
				t.Fatalf("tokens %d/%d dtype %s", p.Decode.Tokens, p.Prefill.Tokens, p.DType)
			}
			// KV caches: one per layer, linear over the context for full
			// layers, a ring of window slots for sliding ones.
			if len(p.KV) != cfg.NumLayers {
				t.Fatalf("%d KV caches for %d layers", len(p.KV), cfg.NumLayers)
			}
			var kvEnd int64
			for i, kv := range p.KV {
				want := 100
				if cfg.IsSliding(kv.Layer) {
					want = cfg.SlidingWindow
				}
				if kv.Layer != i || kv.Slots != want || kv.NKV != cfg.NumKVHeads || kv.HeadDim != cfg.HeadDim || kv.Offset != kvEnd || kv.Offset%Alignment != 0 {
					t.Errorf("kv %d: %+v (want %d slots at %d)", i, kv, want, kvEnd)
				}
				if kv.Half() < int64(kv.Slots*kv.NKV*kv.HeadDim*dtypeSize(act)) {
					t.Errorf("kv %d: %d bytes per half is too small", i, kv.Half())
				}
				kvEnd += kv.Bytes
			}
			if kvEnd != p.KVBytes {
				t.Errorf("KV bytes %d, caches end at %d", p.KVBytes, kvEnd)
			}
			checkWeights(t, p, act)
			for _, s := range []*Schedule{p.Decode, p.Prefill} {
				checkSchedule(t, p, s, act)
				// The kernels of each op, with the adds fused into norms
				// split again.
				ls := make([][]Launch, len(s.Steps))
				for i, st := range s.Steps {
					ls[i] = st.Launches
				}
				split, fusedAdds := unfuseAddNorms(ls)
				if fusedAdds == 0 {
					t.Errorf("%s: no add fused into a norm", s.Class)
				}
				steps := append([]Step(nil), s.Steps...)
				for i := range steps {
					steps[i].Launches = split[i]
				}
				seen := map[string]string{}
				for _, st := range steps {
					key := st.Op
					if st.Op == "attention" {
						key += map[bool]string{true: "/sliding", false: "/full"}[st.Int("window") > 0]
					}
					if prev, ok := seen[key]; ok && prev != kernels(st) && st.Op != "matmul" {
						t.Errorf("%s %s: %s here, %s elsewhere", s.Class, key, kernels(st), prev)
					}
					seen[key] = kernels(st)
				}
				want := map[string]string{
					"embedding": "embedding", "rms_norm": "rms_norm_warp", "rope": "qk_norm_rope",
					"softplus_gate": "softplus_gate", "silu": "silu", "mul": "mul", "add": "add",
					"router_topk": "router_topk_block", "argmax": "argmax",
				}
				if s.Class == Prefill && c.chunk > RouterBlockMaxT {
					want["router_topk"] = "router_topk"
				}
				if s.Class == Decode {
					want["router_topk"] = ""               // in the GEMV's launch (fuseRouter)
					want["attention/full"] = "attn_decode" // 100 slots: 4 splits, merged in the launch
					want["attention/sliding"] = "attn_decode"
					want["moe_experts"] = "moe_gateup_gemv+moe_down_gemv"
				} else {
					want["attention/full"] = "attn_prefill+kv_append"
					want["attention/sliding"] = "attn_prefill+kv_compact_ring"
					if c.chunk > 8 && c.dt == ir.BF16 {
						want["moe_experts"] = "moe_hist+moe_schedule+moe_scatter+moe_gateup_mma+moe_down_mma+moe_combine"
					} else {
						want["moe_experts"] = "moe_gateup_gemv+moe_down_gemv"
					}
				}
				for k, v := range want {
					if seen[k] != v {
						t.Errorf("%s %s: kernels %q, want %q", s.Class, k, seen[k], v)
					}
				}
				for _, st := range s.Steps {
					if st.Op != "matmul" {
						continue
					}
					k := kernels(st)
					if s.Class == Decode && strings.HasSuffix(st.Name, ".rl") && k == "router_fused" {
						continue
					}
					if s.Class == Decode && k != "gemv" || s.Class == Prefill && k != c.matmulPre {
						t.Errorf("%s %s: %s", s.Class, st.Name, k)
					}
					// The router's and the LM head's products are f32.
					if (strings.HasSuffix(st.Name, ".rl") || st.Name == "logits") && st.Out[0].DType != "f32" {
						t.Errorf("%s %s writes %s, want f32", s.Class, st.Name, st.Out[0].DType)
					}
				}
			}
		})
	}
}

func checkWeights(t *testing.T, p *Plan, act string) {
	t.Helper()
	var end int64
	for _, w := range p.Weights {
		want := act
		if strings.HasSuffix(w.Name, "norm.weight") || strings.HasSuffix(w.Name, ".bias") {
			want = "f32"
		}
		if w.DType != want || w.Source != "f32" {
			t.Errorf("weight %s: %s (from %s), want %s", w.Name, w.DType, w.Source, want)
		}
		if w.Offset < 0 {
			t.Errorf("weight %s is not uploaded", w.Name)
			continue
		}
		if w.Offset != end || w.Offset%Alignment != 0 || w.Bytes != int64(elems(w.Shape)*dtypeSize(w.DType)) {
			t.Errorf("weight %s at %d (%d bytes), want at %d", w.Name, w.Offset, w.Bytes, end)
		}
		end += align(w.Bytes)
	}
	if end != p.WeightBytes {
		t.Errorf("weight bytes %d, tensors end at %d", p.WeightBytes, end)
	}
}

// inPlaceInput is the input a step's op may overwrite, or -1.
func inPlaceInput(st Step) int {
	d, ok := ir.Op(st.Op)
	if !ok || d.InPlace == nil {
		return -1
	}
	return d.InPlace(&ir.Node{Op: st.Op, Attrs: ir.Attrs(st.Attrs), Inputs: make([]*ir.Value, len(st.In))})
}

func elems(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// checkSchedule: every operand lies in the arena; a step never writes
// bytes it also reads, unless its output is exactly the buffer of the
// input its op may overwrite (ir.OpDef.InPlace) or it is a decode
// norm_rope rotating its heads in place, nor two outputs over each other;
// the outputs are where the executor looks for them. A step launches
// kernels, unless it is a norm_rope whose heads the one before launched,
// or the decode attention after it rotates (fuseNormRoPEAttention), an
// rms_norm fused into the add or GEMV before it (fuseAddNorm,
// fuseGEMVNorm) or a router_topk the router GEMV before it selects for
// (fuseRouter).
func checkSchedule(t *testing.T, p *Plan, s *Schedule, act string) {
	t.Helper()
	T := s.Tokens
	size := func(o Operand) int64 { return int64(o.Elems(T) * dtypeSize(o.DType)) }
	for i, st := range s.Steps {
		if len(st.Launches) == 0 && (st.Op != "norm_rope" || i == 0 || pairedHeads(s.Steps[i-1]) != st.Out[0].Shape[1]) &&
			(st.Op != "norm_rope" || !rotatedByAttention(s.Steps[i+1:])) &&
			(st.Op != "rms_norm" || !normFusedBefore(s.Steps[:i], st)) &&
			(st.Op != "router_topk" || i == 0 || kernels(s.Steps[i-1]) != "router_fused" && kernels(s.Steps[i-1]) != "router_fused_shared") {
			t.Errorf("%s %s: no kernels", s.Class, st.Name)
		}
		for _, l := range st.Launches {
			if l.Kernel == Memcpy || l.Kernel == CublasLtGEMM {
				continue
			}
			if l.Grid[0] < 1 || l.Block[0] < 32 || l.Block[0] > 1024 || l.Shmem < 0 || l.Shmem > 227<<10 {
				t.Errorf("%s %s: launch %+v", s.Class, st.Name, l)
			}
		}
		var spans [][2]int64
		for _, o := range append(append([]Operand(nil), st.In...), st.Out...) {
			if o.Kind != "activation" {
				continue
			}
			if o.Offset < 0 || o.Offset+size(o) > s.Arena {
				t.Errorf("%s %s: operand %s [%d, %d) outside the arena of %d", s.Class, st.Name, o.Value, o.Offset, o.Offset+size(o), s.Arena)
			}
		}
		for _, o := range st.Out {
			spans = append(spans, [2]int64{o.Offset, o.Offset + size(o)})
		}
		over := inPlaceInput(st)
		for k, o := range st.In {
			if o.Kind != "activation" {
				continue
			}
			if k == over && o.Offset == st.Out[0].Offset && size(o) == size(st.Out[0]) {
				continue
			}
			for _, sp := range spans {
				inPlace := st.Op == "norm_rope" && sp == [2]int64{o.Offset, o.Offset + size(o)}
				if o.Offset < sp[1] && sp[0] < o.Offset+size(o) && !inPlace {
					t.Errorf("%s %s: reads %s over its own output", s.Class, st.Name, o.Value)
				}
			}
		}
		for i := range spans {
			for j := range i {
				if spans[i][0] < spans[j][1] && spans[j][0] < spans[i][1] {
					t.Errorf("%s %s: outputs %d and %d overlap", s.Class, st.Name, i, j)
				}
			}
		}
		for _, o := range st.In {
			if o.Kind == "weight" && (o.Weight < 0 || p.Weights[o.Weight].Name != o.Value || o.Offset != p.Weights[o.Weight].Offset) {
				t.Errorf("%s %s: weight operand %+v does not match the weight table", s.Class, st.Name, o)
			}
		}
		if (st.Op == "attention" || st.Op == "attention_gate") && (st.KV < 0 || p.KV[st.KV].Layer != st.Layer || st.Layer != st.Int("layer")) {
			t.Errorf("%s %s: kv %d layer %d", s.Class, st.Name, st.KV, st.Layer)
		}
	}
	lg, ok1 := s.Value("logits")
	nx, ok2 := s.Value("next")
	if !ok1 || !ok2 || lg.DType != "f32" || nx.DType != "i32" {
		t.Errorf("%s: outputs logits %+v, next %+v", s.Class, lg, nx)
	}
	if b, ok := s.Value("blk.1.qr"); !ok || b.DType != act {
		t.Errorf("%s: blk.1.qr stored as %+v, want %s", s.Class, b, act)
	}
	if b, ok := s.Value("blk.1.rw"); !ok || b.DType != "f32" {
		t.Errorf("%s: router weights stored as %+v, want f32", s.Class, b)
	}
}

// TestLowerDefaultPipeline lowers the graph the default passes make (with
// their fused ops) in both modes: every op has kernels, operands fit, a
// fused expert stack is stored split for the MoE kernels, every decode
// matmul_split writes one row (its outputs back to back: one GEMV) while
// the prefill ones are one GEMM splitting its columns (bf16 on Hopper) or
// a GEMM per block, and residuals are accumulated into in place.
func TestLowerDefaultPipeline(t *testing.T) {
	for _, dt := range []ir.DType{ir.BF16, ir.F32} {
		p, err := Lower(tinyGraph(t), Options{DType: dt, Chunk: 32, MaxContext: 64})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*Schedule{p.Decode, p.Prefill} {
			checkSchedule(t, p, s, dt.String())
		}
		splits := 0
		for _, st := range p.Decode.Steps {
			if st.Op == "matmul_split" {
				splits++
				if !st.SplitRow(1) || len(st.Launches) != 1 || st.Launches[0].Kernel != "gemv" {
					t.Errorf("decode %s: outputs %+v, launches %+v: want one row and one gemv", st.Name, st.Out, st.Launches)
				}
			}
			if st.Op == "moe_grouped" && st.String("gate_up") == ir.GateUpFused {
				if w := p.Weights[st.In[3].Weight]; w.Layout != LayoutGateUpSplit {
					t.Errorf("%s: gate_up stack %s has layout %q", st.Name, w.Name, w.Layout)
				}
			}
		}
		if splits == 0 {
			t.Errorf("%s: no matmul_split in the decode schedule", dt)
		}
		// Every residual dies at the node accumulating into it: each such
		// node writes in place, with no copy.
		for _, s := range []*Schedule{p.Decode, p.Prefill} {
			inPlace := 0
			for _, st := range s.Steps {
				k := inPlaceInput(st)
				if k < 0 {
					continue
				}
				if st.In[k].Offset != st.Out[0].Offset {
					t.Errorf("%s %s (%s): residual at %d, output at %d", s.Class, st.Name, st.Op, st.In[k].Offset, st.Out[0].Offset)
				}
				inPlace++
				for _, l := range st.Launches {
					if l.Kernel == Memcpy {
						t.Errorf("%s %s (%s) writes in place but copies: %s", s.Class, st.Name, st.Op, l)
					}
				}
			}
			if inPlace == 0 {
				t.Errorf("%s %s: no step writes in place", dt, s.Class)
			}
		}
		// A prefill matmul_split is one GEMM whose epilogue writes every
		// output (splitGEMM) on Hopper, one GEMM an output elsewhere.
		for _, st := range p.Prefill.Steps {
			if st.Op != "matmul_split" {
				continue
			}
			var outs []SplitOut
			for _, o := range st.Out {
				outs = append(outs, SplitOut{N: o.Last(0)})
			}
			if dt == ir.BF16 && p.cc() >= 90 && SplitFits(outs, 128) {
				if n := len(st.Launches); n != 1 || st.Launches[0].Kernel != "gemm_wgmma" || st.Launches[0].Ints[4] != 1 {
					t.Errorf("prefill %s: %d launches, not one split gemm_wgmma: %v", st.Name, n, st.Launches)
				}
			} else if len(st.Launches) != len(st.Out) {
				t.Errorf("prefill %s: %d launches for %d outputs", st.Name, len(st.Launches), len(st.Out))
			}
		}
		checkGatedAttention(t, p)
	}
}

// checkGatedAttention: every attention is an attention_gate whose kernel
// reads the gate: decode one attn_decode launch (a split one meeting at
// counters in BaseSync, which the schedule sizes), prefill the attention
// then the cache store.
func checkGatedAttention(t *testing.T, p *Plan) {
	t.Helper()
	splitAttn := 0
	for _, s := range []*Schedule{p.Decode, p.Prefill} {
		gated := 0
		for _, st := range s.Steps {
			if s.Class == Decode && st.Op == "attention_gate" && st.Launches[0].Args[5].Int > 1 {
				splitAttn++
			}
			if st.Op == "attention" || st.Op == "softplus_gate" {
				t.Errorf("%s %s: %s left unfused", s.Class, st.Name, st.Op)
			}
			if st.Op != "attention_gate" {
				continue
			}
			gated++
			gate := Ptr{BaseArena, st.In[4].Offset}
			l := st.Launches[0]
			switch {
			case s.Class == Decode && (len(st.Launches) != 1 || l.Kernel != "attn_decode" || l.Args[15].Ptr() != gate):
				t.Errorf("decode %s: %v, want one attn_decode reading the gate at %v", st.Name, st.Launches, gate)
			case s.Class == Prefill && (len(st.Launches) != 2 || !strings.HasPrefix(l.Kernel, "attn_prefill") || l.Args[len(l.Args)-3].Ptr() != gate):
				t.Errorf("prefill %s: %v, want the attention reading the gate at %v, then the store", st.Name, st.Launches, gate)
			}
			if s.Class == Decode && l.Args[5].Int > 1 {
				nkv := int(l.Args[1].Int)
				if cnt := l.Args[attnArgXQ-1]; cnt.Ptr() != (Ptr{BaseSync, 0}) || s.Sync < DecodeCounters(1, int(l.Args[0].Int), nkv) {
					t.Errorf("decode %s: counters at %v, %d bytes of sync", st.Name, cnt.Ptr(), s.Sync)
				}
			}
		}
		if gated == 0 {
			t.Errorf("%s: no attention_gate", s.Class)
		}
	}
	if splitAttn == 0 {
		t.Errorf("no split decode attention at context %d?", p.MaxContext)
	}
}

// TestSplitRow: the layout rule the executor relies on.
func TestSplitRow(t *testing.T) {
	out := func(off int64, n int, dt string) Operand {
		return Operand{Kind: "activation", DType: dt, Shape: []int{T, n}, Offset: off}
	}
	for _, c := range []struct {
		name string
		st   Step
		t    int
		want bool
	}{
		{"row", Step{Op: "matmul_split", Out: []Operand{out(256, 8, "bf16"), out(272, 4, "bf16"), out(280, 2, "bf16")}}, 1, true},
		{"gap", Step{Op: "matmul_split", Out: []Operand{out(256, 8, "bf16"), out(512, 4, "bf16")}}, 1, false},
		{"order", Step{Op: "matmul_split", Out: []Operand{out(272, 8, "bf16"), out(256, 8, "bf16")}}, 1, false},
		{"dtypes", Step{Op: "matmul_split", Out: []Operand{out(256, 8, "f32"), out(288, 4, "bf16")}}, 1, false},
		{"two tokens", Step{Op: "matmul_split", Out: []Operand{out(256, 8, "bf16"), out(272, 4, "bf16")}}, 2, false},
		{"matmul", Step{Op: "matmul", Out: []Operand{out(256, 8, "bf16")}}, 1, false},
	} {
		if got := c.st.SplitRow(c.t); got != c.want {
			t.Errorf("%s: SplitRow %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLayerAttribution: every step inside a layer block carries its layer.
func TestLayerAttribution(t *testing.T) {
	p, err := Lower(tinyGraph(t, unfused...), Options{MaxContext: 32})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Decode.Steps {
		want := -1
		if strings.HasPrefix(st.Name, "blk.") {
			want = int(st.Name[4] - '0')
		}
		if st.Layer != want {
			t.Errorf("%s: layer %d, want %d", st.Name, st.Layer, want)
		}
	}
}

// TestPlanJSONRoundTrip: a plan survives JSON unchanged, and the read plan
// answers attribute queries as the original does.
func TestPlanJSONRoundTrip(t *testing.T) {
	p, err := Lower(tinyGraph(t, unfused...), Options{MaxContext: 64, Chunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	var a bytes.Buffer
	if err := p.WriteJSON(&a); err != nil {
		t.Fatal(err)
	}
	q, err := ReadJSON(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := q.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("plan JSON changed in a round trip")
	}
	for i, st := range p.Prefill.Steps {
		qs := q.Prefill.Steps[i]
		for k := range st.Attrs {
			if st.Float(k) != qs.Float(k) || st.Int(k) != qs.Int(k) || st.String(k) != qs.String(k) {
				t.Errorf("%s attr %s: %v vs %v", st.Name, k, st.Attrs[k], qs.Attrs[k])
			}
		}
	}
	// A plan read back lowers to the same launches at any T.
	for _, s := range []*Schedule{q.Decode, q.Prefill} {
		for _, T := range []int{s.Tokens, max(1, s.Tokens/3)} {
			got, err := q.At(s, T)
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.At(p.Schedule(s.Class), T)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s at T=%d: the plan read back lowers differently", s.Class, T)
			}
		}
	}
	var txt bytes.Buffer
	if err := p.Print(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"decode T=1", "prefill T=16", "attn_decode", "gemm_wgmma", "tmap(", "kv caches: 4 layers"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("printed plan lacks %q", want)
		}
	}
}

const derivedSrc = `graph d
sym T
input %tokens: i32[T]
input %pos: i32[T]
weight @emb: f32[16,8]
weight @gate: f32[4,8]
weight @up: f32[4,8]
weight @gate_up: f32[8,8] = concat(@gate, @up) {axis=0}
weight @head: f32[4,4]
%e: f32[T,8] = embedding(%tokens, @emb)
%y: f32[T,8] = matmul(%e, @gate_up)
%s1: f32[T,4], %s2: f32[T,4] = split(%y) {axis=1, sizes=[4,4]}
%a: f32[T,4] = add(%s1, %s2)
%logits: f32[T,4] = matmul(%a, @head)
%next: i32[T] = argmax(%logits)
output %logits, %next
`

// TestDerivedWeights: a weight derived by concat is uploaded, its sources
// are read on the host only; split becomes strided copies.
func TestDerivedWeights(t *testing.T) {
	g, err := ir.Parse(derivedSrc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Lower(g, Options{MaxContext: 8, Chunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Weight{}
	for _, w := range p.Weights {
		byName[w.Name] = w
	}
	gu := byName["gate_up"]
	if gu.From == nil || gu.From.Op != "concat" || gu.From.Axis != 0 || len(gu.From.Srcs) != 2 ||
		p.Weights[gu.From.Srcs[0]].Name != "gate" || p.Weights[gu.From.Srcs[1]].Name != "up" || gu.Offset < 0 {
		t.Fatalf("gate_up: %+v", gu)
	}
	if byName["gate"].Offset != -1 || byName["up"].Offset != -1 || byName["emb"].Offset < 0 {
		t.Errorf("sources uploaded: gate %d up %d emb %d", byName["gate"].Offset, byName["up"].Offset, byName["emb"].Offset)
	}
	for _, st := range p.Prefill.Steps {
		if st.Op == "split" && kernels(st) != "copy_rows+copy_rows" {
			t.Errorf("split: %s", kernels(st))
		}
	}
}

func TestLowerErrors(t *testing.T) {
	intWeight := strings.Replace(derivedSrc, "weight @emb:", "weight @bad: i32[4]\nweight @emb:", 1)
	for _, c := range []struct {
		name string
		src  string
		o    Options
		want string
	}{
		{"f16", derivedSrc, Options{DType: ir.F16, MaxContext: 8}, "f32 or bf16"},
		{"no context", derivedSrc, Options{}, "context length"},
		{"negative chunk", derivedSrc, Options{MaxContext: 8, Chunk: -2}, "chunk"},
		{"integer weight", intWeight, Options{MaxContext: 8}, "float weights"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := ir.Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Lower(g, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// FuzzReadJSON: any input either fails to parse or yields a plan that
// re-serialises; nothing panics.
func FuzzReadJSON(f *testing.F) {
	g, err := ir.Parse(derivedSrc)
	if err != nil {
		f.Fatal(err)
	}
	p, err := Lower(g, Options{MaxContext: 8, Chunk: 4})
	if err != nil {
		f.Fatal(err)
	}
	var b bytes.Buffer
	if err := p.WriteJSON(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"decode":{},"prefill":{}}`))
	f.Add([]byte(`{"decode":{"steps":[{"attrs":{"x":[1,2]}}]},"prefill":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := ReadJSON(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, s := range []*Schedule{q.Decode, q.Prefill} {
			for i := range s.Steps {
				st := &s.Steps[i]
				for k := range st.Attrs {
					_, _, _ = st.Int(k), st.Float(k), st.String(k)
				}
				for _, o := range st.In {
					_ = o.Elems(3)
				}
			}
		}
		if _, err := json.Marshal(q); err != nil {
			t.Fatalf("a parsed plan does not serialise: %v", err)
		}
		var txt bytes.Buffer
		_ = q.Print(&txt)
		for _, s := range []*Schedule{q.Decode, q.Prefill} {
			_, _ = q.At(s, 1)
			_, _ = q.At(s, s.Tokens)
		}
	})
}

// pairedHeads is the NK of a norm_rope step's one qk_norm_rope launch: the
// heads of the next step it runs too (0 if none).
// normFusedBefore reports whether the last launch of the steps before
// norm (an rms_norm step) is an add fused with it: writing its output.
func normFusedBefore(before []Step, norm Step) bool {
	for i := len(before) - 1; i >= 0; i-- {
		if ls := before[i].Launches; len(ls) > 0 {
			last := ls[len(ls)-1]
			if _, n, ok := SplitQGEMVNorm(last); ok {
				if _, _, add := unfuseAddNorm(n); !add {
					return n.Args[5].Ptr() == Ptr{BaseArena, norm.Out[0].Offset}
				}
				last = n
			}
			_, n, ok := unfuseAddNorm(last)
			return ok && n.Args[5].Ptr() == Ptr{BaseArena, norm.Out[0].Offset}
		}
	}
	return false
}

func pairedHeads(st Step) int {
	if st.Op != "norm_rope" || len(st.Launches) != 1 || st.Launches[0].Kernel != "qk_norm_rope" {
		return 0
	}
	return int(st.Launches[0].Args[2].Int)
}

// rotatedByAttention reports whether the first launch of steps (past the
// norm_rope steps) is a decode attention doing their norm and rotation
// (NormRoPEAttention).
func rotatedByAttention(steps []Step) bool {
	for _, st := range steps {
		if len(st.Launches) > 0 {
			l := st.Launches[0]
			return l.Kernel == "attn_decode" && len(l.Ints) == 4 && l.Ints[1] == 1
		}
		if st.Op != "norm_rope" {
			return false
		}
	}
	return false
}
