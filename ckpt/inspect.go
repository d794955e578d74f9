package ckpt

import (
	"fmt"
	"sort"
	"strings"
)

// Report describes a checkpoint for people and tools (lagc inspect).
type Report struct {
	Path   string `json:"path"`
	Format string `json:"format"`
	// Architecture is general.architecture (GGUF) or config.json's model_type.
	Architecture string `json:"architecture"`
	Name         string `json:"name,omitempty"`
	// FileType is general.file_type with llama.cpp's name for it (GGUF only).
	FileType     *uint32 `json:"file_type,omitempty"`
	FileTypeName string  `json:"file_type_name,omitempty"`
	// Recipe is the lagc recipe whose choice of types the file matches
	// exactly (see ParseRecipe), or "mixed"; RecipeNote says more.
	Recipe     string `json:"recipe"`
	RecipeNote string `json:"recipe_note"`
	// Parameters: every tensor element; active per token: the embedding
	// excluded, routed experts at top_k/num_experts.
	Parameters       int64 `json:"parameters"`
	ActiveParameters int64 `json:"active_parameters"`
	WeightBytes      int64 `json:"weight_bytes"`
	// BitsPerWeight is 8*WeightBytes/Parameters.
	BitsPerWeight float64      `json:"bits_per_weight"`
	Types         []TypeShare  `json:"types"`
	Memory        MemoryNeed   `json:"gpu_memory"`
	Tensors       []TensorLine `json:"tensors,omitempty"`
}

// TypeShare is what one element type holds in a checkpoint.
type TypeShare struct {
	Type          string  `json:"type"`
	Tensors       int     `json:"tensors"`
	Elements      int64   `json:"elements"`
	Bytes         int64   `json:"bytes"`
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// TensorLine is one row of the tensor table.
type TensorLine struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Shape         []int   `json:"shape"`
	Bytes         int64   `json:"bytes"`
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// MemoryNeed is the device memory a model needs at a context length:
// weights as stored, and bf16 KV caches (full layers hold Context
// positions, sliding layers a ring of sliding_window). Activations and
// workspace come on top (lagc plan shows them).
type MemoryNeed struct {
	Context     int   `json:"context"`
	WeightBytes int64 `json:"weight_bytes"`
	KVBytes     int64 `json:"kv_bytes"`
	TotalBytes  int64 `json:"total_bytes"`
}

// llamaFileTypes names general.file_type values (llama.cpp's llama_ftype).
var llamaFileTypes = map[uint32]string{
	0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 7: "MOSTLY_Q8_0", 8: "MOSTLY_Q5_0",
	9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L",
	14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M", 18: "MOSTLY_Q6_K",
	19: "MOSTLY_IQ2_XXS", 20: "MOSTLY_IQ2_XS", 21: "MOSTLY_Q2_K_S", 22: "MOSTLY_IQ3_XS", 23: "MOSTLY_IQ3_XXS",
	24: "MOSTLY_IQ1_S", 25: "MOSTLY_IQ4_NL", 26: "MOSTLY_IQ3_S", 27: "MOSTLY_IQ3_M", 28: "MOSTLY_IQ2_S",
	29: "MOSTLY_IQ2_M", 30: "MOSTLY_IQ4_XS", 31: "MOSTLY_IQ1_M", 32: "MOSTLY_BF16", 36: "MOSTLY_TQ1_0",
	37: "MOSTLY_TQ2_0", 38: "MOSTLY_MXFP4_MOE",
}

// Inspect summarises ck; ctx is the context length of the memory estimate
// (0: the model's max_position_embeddings).
func Inspect(ck Checkpoint, ctx int) *Report {
	cfg := ck.Config()
	r := &Report{Path: ck.Path(), Format: ck.Format(), Architecture: cfg.Architecture}
	if r.Architecture == "" {
		r.Architecture = "laguna"
	}
	meta := ck.Metadata()
	if s, ok := meta["general.architecture"].(string); ok {
		r.Architecture = s
	}
	if s, ok := meta["general.name"].(string); ok {
		r.Name = s
	}
	if v, ok := asInt(meta["general.file_type"]); ok && v >= 0 && v <= 1<<31 {
		ft := uint32(v)
		r.FileType = &ft
		r.FileTypeName = llamaFileTypes[ft]
	}
	shares := map[DType]*TypeShare{}
	for _, t := range ck.Tensors() {
		n := t.Elements()
		r.Tensors = append(r.Tensors, TensorLine{Name: t.Name, Type: t.DType.String(), Shape: t.Shape, Bytes: t.Size, BitsPerWeight: bits(t.Size, n)})
		s := shares[t.DType]
		if s == nil {
			s = &TypeShare{Type: t.DType.String()}
			shares[t.DType] = s
		}
		s.Tensors++
		s.Elements += n
		s.Bytes += t.Size
		r.Parameters += n
		r.WeightBytes += t.Size
		r.ActiveParameters += activeElements(t, n, cfg.NumExpertsPerTok, cfg.NumExperts)
	}
	for _, s := range shares {
		s.BitsPerWeight = bits(s.Bytes, s.Elements)
		r.Types = append(r.Types, *s)
	}
	sort.Slice(r.Types, func(i, j int) bool {
		if r.Types[i].Bytes != r.Types[j].Bytes {
			return r.Types[i].Bytes > r.Types[j].Bytes
		}
		return r.Types[i].Type < r.Types[j].Type
	})
	r.BitsPerWeight = bits(r.WeightBytes, r.Parameters)
	r.Recipe, r.RecipeNote = MatchRecipe(ck.Tensors())
	if ctx <= 0 {
		ctx = cfg.MaxPositionEmbeddings
	}
	r.Memory = MemoryNeed{Context: ctx, WeightBytes: r.WeightBytes}
	for l := 0; l < cfg.NumLayers; l++ {
		slots := ctx
		if cfg.IsSliding(l) && cfg.SlidingWindow > 0 {
			slots = min(ctx, cfg.SlidingWindow)
		}
		r.Memory.KVBytes += 2 * 2 * int64(slots) * int64(cfg.NumKVHeads) * int64(cfg.HeadDim) // K and V, bf16
	}
	r.Memory.TotalBytes = r.Memory.WeightBytes + r.Memory.KVBytes
	return r
}

func bits(bytes, elems int64) float64 {
	if elems == 0 {
		return 0
	}
	return 8 * float64(bytes) / float64(elems)
}

// activeElements is how many of a tensor's n elements one token reads:
// none of the embedding table (a lookup), top_k/num_experts of a routed
// expert stack, all of the rest.
func activeElements(t TensorInfo, n int64, topK, experts int) int64 {
	switch {
	case t.Name == "token_embd.weight":
		return 0
	case strings.HasSuffix(t.Name, "_exps.weight") && experts > 0:
		return n * int64(topK) / int64(experts)
	}
	return n
}

// MatchRecipe names the recipe whose choice of type agrees with every
// quantisable tensor's stored type (mixed recipes first, then pure types),
// with a note; "mixed" when none does.
func MatchRecipe(tensors []TensorInfo) (name, note string) {
	candidates := []string{"q4_k_m", "q5_k_m"}
	for t := range ftypes {
		candidates = append(candidates, t.String())
	}
	sort.Strings(candidates[2:])
	counts := map[DType]int64{}
	for _, t := range tensors {
		if Quantizable(t) {
			counts[t.DType] += t.Elements()
		}
	}
	for _, c := range candidates {
		r, err := ParseRecipe(c)
		if err != nil {
			continue
		}
		if recipeMatches(r, tensors) {
			return r.Name, recipeNote(r, counts)
		}
	}
	var total int64
	types := make([]DType, 0, len(counts))
	for t, n := range counts {
		total += n
		types = append(types, t)
	}
	if total == 0 {
		return "none", "no weight matrices"
	}
	sort.Slice(types, func(i, j int) bool {
		return counts[types[i]] > counts[types[j]] || counts[types[i]] == counts[types[j]] && types[i] < types[j]
	})
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %.1f%%", t, 100*float64(counts[t])/float64(total))
	}
	return "mixed", "no lagc recipe gives these types; weight matrices by elements: " + strings.Join(parts, ", ")
}

func recipeMatches(r *Recipe, tensors []TensorInfo) bool {
	any := false
	for _, t := range tensors {
		if !Quantizable(t) {
			continue
		}
		any = true
		if r.TypeFor(t) != t.DType {
			return false
		}
	}
	return any
}

func recipeNote(r *Recipe, counts map[DType]int64) string {
	var fb []string
	for t := range counts {
		if t != r.Base && !ruleType(r, t) {
			fb = append(fb, t.String())
		}
	}
	sort.Strings(fb)
	note := fmt.Sprintf("every weight matrix %s", r.Base)
	if len(r.Rules) > 0 {
		note = fmt.Sprintf("weight matrices %s; attention, shared expert and LM head q8_0 (ggml-org's Laguna recipe)", r.Base)
	}
	if len(fb) > 0 {
		note += "; llama-quantize's fallbacks for rows that are not whole blocks: " + strings.Join(fb, ", ")
	}
	return note
}

func ruleType(r *Recipe, t DType) bool {
	for _, rule := range r.Rules {
		if rule.Type == t {
			return true
		}
	}
	return false
}
