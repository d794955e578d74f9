package ckpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"lagc/config"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// openHF opens a Hugging Face checkpoint directory.
func openHF(dir string) (Checkpoint, error) { return openHFFrom(diskDir(dir)) }

// openHFFrom opens the Hugging Face checkpoint whose files d reads.
func openHFFrom(d hfDir) (_ Checkpoint, err error) {
	data, err := d.readFile("config.json", config.MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("reading model config: %w", err)
	}
	cfg, err := config.ParseHFConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.path("config.json"), err)
	}
	shards, err := hfShards(d)
	if err != nil {
		return nil, err
	}
	c := &checkpoint{path: d.path(""), format: "safetensors", cfg: cfg, entries: map[string]*entry{}, dir: d.fs()}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	m := newHFMapper(c)
	for _, shard := range shards {
		f, err := d.mapFile(shard.file)
		if err != nil {
			return nil, fmt.Errorf("opening shard: %w", err)
		}
		c.files = append(c.files, f)
		ts, err := parseSafetensors(f.data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		have := map[string]bool{}
		for _, t := range ts {
			have[t.name] = true
			if err := m.add(t, f, shard.file); err != nil {
				return nil, err
			}
		}
		for _, want := range shard.want {
			if !have[want] {
				return nil, fmt.Errorf("model.safetensors.index.json puts %s in %s, but that file has no such tensor", want, shard.file)
			}
		}
	}
	if err := m.finish(); err != nil {
		return nil, err
	}
	c.sortOrder()
	return c, nil
}

type hfShard struct {
	file string
	want []string // tensors the index places in this file
}

// maxIndexBytes bounds model.safetensors.index.json (a few hundred
// kilobytes for the largest models).
const maxIndexBytes = 256 << 20

// hfShards lists the safetensors files of dir: those of the index if there
// is one, else model.safetensors, else every *.safetensors file.
func hfShards(d hfDir) ([]hfShard, error) {
	idxPath := d.path("model.safetensors.index.json")
	data, err := d.readFile("model.safetensors.index.json", maxIndexBytes)
	switch {
	case err == nil:
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("%s: %w", idxPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: weight_map is empty", idxPath)
		}
		byFile := map[string][]string{}
		for name, file := range idx.WeightMap {
			// Shards must be plain names inside dir.
			if file == "" || filepath.Base(file) != file || file == "." || file == ".." {
				return nil, fmt.Errorf("%s: tensor %s names shard %q, which is not a file name in the checkpoint directory", idxPath, name, file)
			}
			byFile[file] = append(byFile[file], name)
		}
		var out []hfShard
		for f, names := range byFile {
			sort.Strings(names)
			out = append(out, hfShard{file: f, want: names})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].file < out[j].file })
		return out, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading shard index: %w", err)
	}
	if d.exists("model.safetensors") {
		return []hfShard{{file: "model.safetensors"}}, nil
	}
	matches := d.glob("*.safetensors")
	if len(matches) == 0 {
		return nil, fmt.Errorf("%s has config.json but no model.safetensors, model.safetensors.index.json or other *.safetensors file", d.path(""))
	}
	sort.Strings(matches)
	out := make([]hfShard, len(matches))
	for i, m := range matches {
		out[i] = hfShard{file: filepath.Base(m)}
	}
	return out, nil
}

// hfSrc is one safetensors tensor and where it lives.
type hfSrc struct {
	t     stTensor
	f     *mappedFile
	shard string
}

func (s hfSrc) desc() string { return s.t.name + " in " + s.shard }

func (s hfSrc) piece() piece { return piece{file: s.f, off: s.t.begin, n: s.t.end - s.t.begin} }

type expertKey struct {
	layer int
	kind  string // gate, up, down
}

// hfMapper maps HF tensor names onto canonical ones. Per-expert tensors are
// collected and stacked in finish; no data is copied.
type hfMapper struct {
	c       *checkpoint
	experts map[expertKey]map[int]hfSrc
}

func newHFMapper(c *checkpoint) *hfMapper {
	return &hfMapper{c: c, experts: map[expertKey]map[int]hfSrc{}}
}

// Direct renames of the per-layer HF suffixes.
var hfLayerNames = map[string]string{
	"input_layernorm.weight":              "attn_norm.weight",
	"post_attention_layernorm.weight":     "ffn_norm.weight",
	"self_attn.q_proj.weight":             "attn_q.weight",
	"self_attn.k_proj.weight":             "attn_k.weight",
	"self_attn.v_proj.weight":             "attn_v.weight",
	"self_attn.o_proj.weight":             "attn_output.weight",
	"self_attn.g_proj.weight":             "attn_gate.weight",
	"self_attn.q_norm.weight":             "attn_q_norm.weight",
	"self_attn.k_norm.weight":             "attn_k_norm.weight",
	"mlp.gate_proj.weight":                "ffn_gate.weight",
	"mlp.up_proj.weight":                  "ffn_up.weight",
	"mlp.down_proj.weight":                "ffn_down.weight",
	"mlp.gate.weight":                     "ffn_gate_inp.weight",
	"mlp.experts.e_score_correction_bias": "exp_probs_b.bias",
	"mlp.gate.e_score_correction_bias":    "exp_probs_b.bias",
	"mlp.shared_expert.gate_proj.weight":  "ffn_gate_shexp.weight",
	"mlp.shared_expert.up_proj.weight":    "ffn_up_shexp.weight",
	"mlp.shared_expert.down_proj.weight":  "ffn_down_shexp.weight",
	"mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
	"mlp.shared_experts.up_proj.weight":   "ffn_up_shexp.weight",
	"mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
	"mlp.experts.down_proj":               "ffn_down_exps.weight",
	"mlp.experts.down_proj.weight":        "ffn_down_exps.weight",
}

func (m *hfMapper) whole(name string, s hfSrc) error {
	return m.c.add(&entry{
		info:   TensorInfo{Name: name, DType: s.t.dtype, Shape: s.t.shape, Size: s.t.end - s.t.begin},
		pieces: []piece{s.piece()},
		source: s.desc(),
	})
}

func (m *hfMapper) add(t stTensor, f *mappedFile, shard string) error {
	s := hfSrc{t: t, f: f, shard: shard}
	name := strings.TrimPrefix(t.name, "model.")
	switch name {
	case "embed_tokens.weight":
		return m.whole("token_embd.weight", s)
	case "norm.weight":
		return m.whole("output_norm.weight", s)
	case "lm_head.weight":
		if m.c.cfg.TieWordEmbeddings {
			return nil // tied: the embedding is the head
		}
		return m.whole("output.weight", s)
	}
	if strings.HasSuffix(name, "rotary_emb.inv_freq") {
		return nil // a buffer some exporters save; recomputed from the config
	}
	rest, ok := strings.CutPrefix(name, "layers.")
	if !ok {
		return m.unknown(s)
	}
	num, suffix, ok := strings.Cut(rest, ".")
	layer, err := strconv.Atoi(num)
	if !ok || err != nil || layer < 0 || strconv.Itoa(layer) != num {
		return m.unknown(s)
	}
	blk := "blk." + num + "."
	if c, ok := hfLayerNames[suffix]; ok {
		return m.whole(blk+c, s)
	}
	switch suffix {
	case "mlp.experts.gate_up_proj", "mlp.experts.gate_up_proj.weight":
		return m.fusedGateUp(blk, s)
	}
	// Per-expert: mlp.experts.E.{gate,up,down}_proj.weight
	if r, ok := strings.CutPrefix(suffix, "mlp.experts."); ok {
		en, w, ok := strings.Cut(r, ".")
		e, err := strconv.Atoi(en)
		kind, _ := strings.CutSuffix(w, "_proj.weight")
		if ok && err == nil && strconv.Itoa(e) == en && (kind == "gate" || kind == "up" || kind == "down") {
			if e < 0 || e >= m.c.cfg.NumExperts {
				return fmt.Errorf("%s: expert index %d is out of range: config has num_experts = %d", s.desc(), e, m.c.cfg.NumExperts)
			}
			k := expertKey{layer, kind}
			if m.experts[k] == nil {
				m.experts[k] = map[int]hfSrc{}
			}
			m.experts[k][e] = s
			return nil
		}
	}
	return m.unknown(s)
}

// unknown keeps a tensor lagc has no name for under its HF name, so that
// Validate reports it rather than silently ignoring weights (a bias, say).
func (m *hfMapper) unknown(s hfSrc) error {
	return m.c.add(&entry{
		info:   TensorInfo{Name: s.t.name, DType: s.t.dtype, Shape: s.t.shape, Size: s.t.end - s.t.begin},
		pieces: []piece{s.piece()},
		source: s.desc(),
	})
}

// fusedGateUp splits gate_up_proj [E, 2I, H] into gate and up [E, I, H],
// gate rows first within each expert, as LagunaExperts chunks it.
func (m *hfMapper) fusedGateUp(blk string, s hfSrc) error {
	sh := s.t.shape
	if len(sh) != 3 || sh[1]%2 != 0 {
		return fmt.Errorf("%s has shape %v: want [num_experts, 2*moe_intermediate_size, hidden_size]", s.desc(), sh)
	}
	E, I, H := sh[0], sh[1]/2, sh[2]
	es := int64(2)
	if s.t.dtype == F32 {
		es = 4
	}
	half := int64(I) * int64(H) * es
	for i, name := range []string{"ffn_gate_exps.weight", "ffn_up_exps.weight"} {
		ps := make([]piece, E)
		for e := range E {
			ps[e] = piece{file: s.f, off: s.t.begin + int64(e)*2*half + int64(i)*half, n: half}
		}
		part := "gate rows"
		if i == 1 {
			part = "up rows"
		}
		err := m.c.add(&entry{
			info:   TensorInfo{Name: blk + name, DType: s.t.dtype, Shape: []int{E, I, H}, Size: int64(E) * half},
			pieces: ps,
			source: s.desc() + " (" + part + ")",
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// finish stacks the per-expert tensors of every layer.
func (m *hfMapper) finish() error {
	keys := make([]expertKey, 0, len(m.experts))
	for k := range m.experts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].layer != keys[j].layer {
			return keys[i].layer < keys[j].layer
		}
		return keys[i].kind < keys[j].kind
	})
	for _, k := range keys {
		srcs := m.experts[k]
		name := fmt.Sprintf("blk.%d.ffn_%s_exps.weight", k.layer, k.kind)
		n := m.c.cfg.NumExperts
		first, ok := srcs[0]
		if !ok {
			return fmt.Errorf("%s: expert 0 is missing (model.layers.%d.mlp.experts.0.%s_proj.weight)", name, k.layer, k.kind)
		}
		// Find a missing expert before allocating n pieces: n comes from config.json.
		for e := 0; len(srcs) < n; e++ {
			if _, ok := srcs[e]; !ok {
				return fmt.Errorf("%s: expert %d of %d is missing (model.layers.%d.mlp.experts.%d.%s_proj.weight)",
					name, e, n, k.layer, e, k.kind)
			}
		}
		ps := make([]piece, n)
		var size int64
		for e := range n {
			s := srcs[e]
			if s.t.dtype != first.t.dtype || !equalShape(s.t.shape, first.t.shape) {
				return fmt.Errorf("%s: %s is %s %v but %s is %s %v: experts must agree",
					name, s.desc(), s.t.dtype, s.t.shape, first.desc(), first.t.dtype, first.t.shape)
			}
			ps[e] = s.piece()
			size += ps[e].n
		}
		shape := append([]int{n}, first.t.shape...)
		src := fmt.Sprintf("model.layers.%d.mlp.experts.{0..%d}.%s_proj.weight", k.layer, n-1, k.kind)
		if err := m.c.add(&entry{info: TensorInfo{Name: name, DType: first.t.dtype, Shape: shape, Size: size}, pieces: ps, source: src}); err != nil {
			return err
		}
	}
	return nil
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
