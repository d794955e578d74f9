package ckpt

import (
	"fmt"
	"lagc/quant"
	"regexp"
	"sort"
	"strings"
)

// A Recipe chooses the stored type of every tensor of a GGUF file, as
// llama-quantize's file types and --tensor-type overrides do.
type Recipe struct {
	Name string
	// Base is the type of weight matrices that no rule matches.
	Base DType
	// Rules are tried in order; the first whose pattern matches a tensor's
	// name gives its type.
	Rules []TypeRule
	// FileType is llama.cpp's general.file_type (enum llama_ftype).
	FileType uint32
}

// TypeRule gives the type of the tensors whose name matches Pattern.
type TypeRule struct {
	Pattern *regexp.Regexp
	Type    DType
}

// llama_ftype values of the recipes below.
var ftypes = map[DType]uint32{
	F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9, Q2_K: 10, Q3_K: 12,
	Q4_K: 15, Q5_K: 17, Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30, BF16: 32,
}

// mixedOverrides is ggml-org's recipe for Laguna's Q4_K_M release: LM head,
// attention and shared expert in Q8_0, everything else in the base type.
var mixedOverrides = []TypeRule{
	{regexp.MustCompile(`^output\.weight$`), Q8_0},
	{regexp.MustCompile(`_shexp`), Q8_0},
	{regexp.MustCompile(`\.attn_`), Q8_0},
}

// RecipeNames lists what ParseRecipe accepts.
func RecipeNames() []string {
	var out []string
	for t := range ftypes {
		out = append(out, t.String())
	}
	sort.Strings(out)
	return append(out, "q4_k_m", "q5_k_m")
}

// ParseRecipe parses a type name (every weight matrix in that type, as
// llama-quantize --pure) or a mixed recipe: q4_k_m and q5_k_m (routed and
// dense FFN and the embedding in Q4_K or Q5_K; attention, shared expert and
// LM head in Q8_0).
func ParseRecipe(s string) (*Recipe, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	switch name {
	case "q4_k_m":
		return &Recipe{Name: name, Base: Q4_K, Rules: mixedOverrides, FileType: 15}, nil
	case "q5_k_m":
		return &Recipe{Name: name, Base: Q5_K, Rules: mixedOverrides, FileType: 17}, nil
	}
	t, err := quant.ParseType(name)
	if err == nil {
		if ft, ok := ftypes[t]; ok && t.CanQuantize() {
			return &Recipe{Name: t.String(), Base: t, FileType: ft}, nil
		}
	}
	return nil, fmt.Errorf("unknown quantisation %q: want one of %s", s, strings.Join(RecipeNames(), ", "))
}

// Quantizable reports whether llama.cpp would quantise a tensor: matrices
// and expert stacks, except norms and the router (ffn_gate_inp), which it
// keeps in f32.
func Quantizable(t TensorInfo) bool {
	return len(t.Shape) >= 2 && strings.HasSuffix(t.Name, "weight") &&
		!strings.HasSuffix(t.Name, "_norm.weight") && !strings.Contains(t.Name, "ffn_gate_inp.weight")
}

// TypeFor returns the stored type of t under the recipe: f32 for what is
// not quantised, else the first matching rule's type or Base, with
// llama-quantize's fallback for rows that are not a whole number of blocks
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K and Q3_K -> Q4_0,
// IQ4_XS -> IQ4_NL, and F16 when even that does not divide the row).
func (r *Recipe) TypeFor(t TensorInfo) DType {
	if !Quantizable(t) {
		return F32
	}
	want := r.Base
	for _, rule := range r.Rules {
		if rule.Pattern.MatchString(t.Name) {
			want = rule.Type
			break
		}
	}
	cols := t.Shape[len(t.Shape)-1]
	if cols%want.BlockElems() == 0 {
		return want
	}
	fb := map[DType]DType{Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0, Q2_K: Q4_0, Q3_K: Q4_0, IQ4_XS: IQ4_NL}[want]
	if fb != 0 && cols%fb.BlockElems() == 0 {
		return fb
	}
	return F16
}
