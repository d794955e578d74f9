package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"lagc/config"
	"lagc/quant"
	"strings"
)

// KV is one GGUF metadata entry. Value is a Go value of a type GGUF has:
// uint8 ... float64, bool, string, a slice of one of those, or []any of
// slices for nested arrays.
type KV struct {
	Key   string
	Value any
}

// WriteOptions controls WriteGGUF.
type WriteOptions struct {
	// DType is the element type of weight matrices: F32, F16 or BF16.
	// Vectors, norms and the router (ffn_gate_inp) stay f32, as llama.cpp
	// keeps them.
	DType DType
	// KeepDType writes every matrix in its stored type (DType is ignored);
	// vectors, norms and the router are still written in f32.
	KeepDType bool
	// Recipe, when set, chooses each tensor's type (DType and KeepDType
	// are ignored); quantised types are produced by package quant.
	Recipe *Recipe
	// Name is general.name; empty omits it.
	Name string
	// Extra metadata (a tokenizer, say), written after the model's keys.
	Extra []KV
	// Progress, when set, is called after each tensor is written.
	Progress func(done, total int, t TensorInfo, out DType)
}

// ggufAlignment is the data alignment lagc writes (GGUF's default, so no
// general.alignment key is needed).
const ggufAlignment = 32

// ConfigMetadata returns the GGUF metadata of cfg under llama.cpp's laguna
// keys, plus lagc's router-softcap key. It fails for a configuration the
// keys cannot express.
func ConfigMetadata(cfg *config.Config) ([]KV, error) {
	n := cfg.NumLayers
	const p = "laguna."
	heads := make([]int32, n)
	pattern := make([]bool, n)
	for l := 0; l < n; l++ {
		heads[l] = int32(cfg.Heads(l))
		pattern[l] = cfg.IsSliding(l)
	}
	lead := 0
	for lead < n && !cfg.IsMoE(lead) {
		lead++
	}
	anyMoE := false
	for l := lead; l < n; l++ {
		if !cfg.IsMoE(l) {
			return nil, fmt.Errorf("mlp_layer_types %v: GGUF's leading_dense_block_count can only express dense layers before all MoE layers", cfg.MLPLayerTypes)
		}
		anyMoE = true
	}
	full, swa := cfg.RopeParameters[config.FullAttention], cfg.RopeParameters[config.SlidingAttention]
	if swa.Type == "yarn" {
		return nil, fmt.Errorf("rope_parameters.sliding_attention is yarn: llama.cpp's laguna keys give sliding layers default rope only")
	}
	kv := []KV{
		{"general.architecture", "laguna"},
		{p + "block_count", u32(cfg.NumLayers)},
		{p + "context_length", u32(cfg.MaxPositionEmbeddings)},
		{p + "embedding_length", u32(cfg.HiddenSize)},
		{p + "feed_forward_length", u32(cfg.IntermediateSize)},
		{p + "vocab_size", u32(cfg.VocabSize)},
		{p + "attention.head_count", heads},
		{p + "attention.head_count_kv", u32(cfg.NumKVHeads)},
		{p + "attention.key_length", u32(cfg.HeadDim)},
		{p + "attention.value_length", u32(cfg.HeadDim)},
		{p + "attention.layer_norm_rms_epsilon", float32(cfg.RMSNormEps)},
		{p + "attention.sliding_window_pattern", pattern},
		{KeyGatePerHead, cfg.Gating != config.GatingPerElement},
	}
	if cfg.SlidingWindow > 0 {
		kv = append(kv, KV{p + "attention.sliding_window", u32(cfg.SlidingWindow)})
	}
	kv = append(kv, KV{p + "leading_dense_block_count", u32(lead)})
	if anyMoE {
		kv = append(kv,
			KV{p + "expert_count", u32(cfg.NumExperts)},
			KV{p + "expert_used_count", u32(cfg.NumExpertsPerTok)},
			KV{p + "expert_feed_forward_length", u32(cfg.MoEIntermediateSize)},
			KV{p + "expert_shared_feed_forward_length", u32(cfg.SharedExpertSize)},
			KV{p + "expert_weights_norm", true},
			KV{p + "expert_weights_scale", float32(cfg.RoutedScaling)},
			KV{p + "expert_gating_func", uint32(2)}, // sigmoid
			KV{KeyRouterSoftcap, float32(cfg.RouterSoftcap)},
		)
	}
	kv = append(kv,
		KV{p + "rope.dimension_count", u32(int(float64(cfg.HeadDim) * full.PartialRotaryFactor))},
		KV{p + "rope.dimension_count_swa", u32(int(float64(cfg.HeadDim) * swa.PartialRotaryFactor))},
		KV{p + "rope.freq_base", float32(full.Theta)},
		KV{p + "rope.freq_base_swa", float32(swa.Theta)},
	)
	if full.Type == "yarn" {
		kv = append(kv,
			KV{p + "rope.scaling.type", "yarn"},
			KV{p + "rope.scaling.factor", float32(full.Factor)},
			KV{p + "rope.scaling.original_context_length", u32(full.OriginalContext)},
			KV{p + "rope.scaling.yarn_beta_fast", float32(full.BetaFast)},
			KV{p + "rope.scaling.yarn_beta_slow", float32(full.BetaSlow)},
		)
		if full.AttentionFactor != 0 {
			kv = append(kv, KV{p + "rope.scaling.yarn_attn_factor", float32(full.AttentionFactor)})
		}
	}
	if cfg.BOSTokenID >= 0 {
		kv = append(kv, KV{"tokenizer.ggml.bos_token_id", u32(cfg.BOSTokenID)})
	}
	if len(cfg.EOSTokenIDs) > 0 {
		kv = append(kv, KV{"tokenizer.ggml.eos_token_id", u32(cfg.EOSTokenIDs[0])})
	}
	if len(cfg.EOSTokenIDs) > 1 {
		kv = append(kv, KV{"tokenizer.ggml.eot_token_id", u32(cfg.EOSTokenIDs[1])})
	}
	if cfg.PadTokenID >= 0 {
		kv = append(kv, KV{"tokenizer.ggml.padding_token_id", u32(cfg.PadTokenID)})
	}
	return kv, nil
}

func u32(v int) uint32 { return uint32(v) }

// outDType picks the stored type of one tensor in the output.
func outDType(t TensorInfo, opt WriteOptions) (DType, error) {
	var out DType
	switch {
	case opt.Recipe != nil:
		out = opt.Recipe.TypeFor(t)
	case !Quantizable(t) && (t.DType.Float() || !opt.KeepDType):
		out = F32
	case opt.KeepDType:
		out = t.DType
	default:
		out = opt.DType
	}
	if out != t.DType && !t.DType.Supported() {
		return 0, fmt.Errorf("%s is %s, which lagc cannot convert to %s (it reads %s)",
			t.Name, t.DType, out, strings.Join(quant.Names(), ", "))
	}
	if err := checkRows(t.Shape, out); err != nil {
		return 0, fmt.Errorf("%s: %w", t.Name, err)
	}
	return out, nil
}

// WriteGGUF writes ck as a GGUF v3 file to w, one tensor at a time: the
// whole model is never held in memory.
func WriteGGUF(w io.Writer, ck Checkpoint, opt WriteOptions) error {
	if opt.Recipe == nil && !opt.KeepDType && !opt.DType.Float() {
		return fmt.Errorf("output dtype %s: want f32, f16 or bf16 (quantised types go through a Recipe)", opt.DType)
	}
	kv, err := ConfigMetadata(ck.Config())
	if err != nil {
		return fmt.Errorf("model configuration: %w", err)
	}
	tensors := ck.Tensors()
	outs := make([]DType, len(tensors))
	elems := map[DType]int64{}
	for i, t := range tensors {
		if outs[i], err = outDType(t, opt); err != nil {
			return err
		}
		if len(t.Shape) >= 2 {
			elems[outs[i]] += t.Elements()
		}
	}
	ft := fileType(elems)
	if opt.Recipe != nil {
		ft = opt.Recipe.FileType
	}
	kv = append(kv, KV{"general.file_type", ft})
	for _, d := range outs {
		if d.Quantized() {
			// ggml's block layouts since 2023 (GGML_QNT_VERSION); llama-quantize writes it too.
			kv = append(kv, KV{"general.quantization_version", uint32(2)})
			break
		}
	}
	if opt.Name != "" {
		kv = append(kv, KV{"general.name", opt.Name})
	}
	kv = append(kv, opt.Extra...)

	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, DType: outs[i], Shape: t.Shape}
	}
	h, sizes, align, err := ggufHeader(kv, infos)
	if err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for i, t := range tensors {
		if err := writeTensor(w, ck, t, outs[i]); err != nil {
			return fmt.Errorf("writing %s: %w", t.Name, err)
		}
		if pad := alignUp(sizes[i], align) - sizes[i]; pad > 0 {
			if _, err := w.Write(make([]byte, pad)); err != nil {
				return err
			}
		}
		if opt.Progress != nil {
			opt.Progress(i+1, len(tensors), t, outs[i])
		}
	}
	return nil
}

// ggufHeader encodes the header of a GGUF v3 file: metadata, tensor infos
// (offsets packed in order, each aligned) and the padding before the data.
// It returns the header, each tensor's byte size and the alignment, taken
// from general.alignment when kv sets it.
func ggufHeader(kv []KV, infos []TensorInfo) ([]byte, []int64, int64, error) {
	var h bytes.Buffer
	le := func(v any) { binary.Write(&h, binary.LittleEndian, v) }
	le(uint32(ggufMagic))
	le(uint32(3))
	le(uint64(len(infos)))
	le(uint64(len(kv)))
	align := int64(ggufAlignment)
	seen := map[string]bool{}
	for _, e := range kv {
		if seen[e.Key] {
			return nil, nil, 0, fmt.Errorf("metadata key %s given twice", e.Key)
		}
		seen[e.Key] = true
		if e.Key == "general.alignment" {
			a, ok := e.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, nil, 0, fmt.Errorf("general.alignment must be a uint32 power of two, got %v", e.Value)
			}
			align = int64(a)
		}
		writeString(&h, e.Key)
		if err := writeValue(&h, e.Value, true); err != nil {
			return nil, nil, 0, fmt.Errorf("metadata %s: %w", e.Key, err)
		}
	}
	sizes := make([]int64, len(infos))
	off := int64(0)
	for i, t := range infos {
		n, err := numElements(t.Shape)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		if err := checkRows(t.Shape, t.DType); err != nil {
			return nil, nil, 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		if sizes[i], err = t.DType.Bytes(n); err != nil {
			return nil, nil, 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		writeString(&h, t.Name)
		le(uint32(len(t.Shape)))
		for j := len(t.Shape) - 1; j >= 0; j-- {
			le(uint64(t.Shape[j]))
		}
		le(uint32(t.DType))
		le(uint64(off))
		off = alignUp(off+sizes[i], align)
	}
	h.Write(make([]byte, alignUp(int64(h.Len()), align)-int64(h.Len())))
	return h.Bytes(), sizes, align, nil
}

// GGUFTensor is one tensor for EncodeGGUF: Data holds its bytes in DType.
type GGUFTensor struct {
	Name  string
	DType DType
	Shape []int // PyTorch order
	Data  []byte
}

// EncodeGGUF writes a GGUF v3 file from metadata and in-memory tensors:
// for synthetic files and tests. Model conversion uses WriteGGUF.
func EncodeGGUF(w io.Writer, kv []KV, tensors []GGUFTensor) error {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	h, sizes, align, err := ggufHeader(kv, infos)
	if err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for i, t := range tensors {
		if int64(len(t.Data)) != sizes[i] {
			return fmt.Errorf("%s: %d bytes of data, but %s %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, sizes[i])
		}
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
		if _, err := w.Write(make([]byte, alignUp(sizes[i], align)-sizes[i])); err != nil {
			return err
		}
	}
	return nil
}

// fileType is llama.cpp's general.file_type for the type holding the most
// matrix elements.
func fileType(elems map[DType]int64) uint32 {
	best, bestN := F32, int64(-1)
	for t, n := range elems {
		if _, ok := ftypes[t]; ok && (n > bestN || n == bestN && t < best) {
			best, bestN = t, n
		}
	}
	return ftypes[best]
}

// chunkElems bounds the conversion buffer (elements) while streaming: 16
// MiB of float32, split across cores when quantising. A multiple of every
// block size.
const chunkElems = 1 << 22

// writeTensor streams one tensor, converting piece by piece in chunks.
func writeTensor(w io.Writer, ck Checkpoint, t TensorInfo, out DType) error {
	if s, ok := ck.(*synthetic); ok && t.DType == out {
		return s.stream(w, t)
	}
	c, ok := ck.(*checkpoint)
	if !ok {
		// Another implementation: go through its public methods.
		if t.DType == out {
			raw, err := ck.Raw(t.Name)
			if err != nil {
				return err
			}
			_, err = w.Write(raw)
			return err
		}
		f, err := ck.ReadF32(t.Name)
		if err != nil {
			return err
		}
		buf, err := encode(nil, f, out)
		if err != nil {
			return err
		}
		_, err = w.Write(buf)
		return err
	}
	e, err := c.lookup(t.Name)
	if err != nil {
		return err
	}
	if t.DType == out {
		for _, p := range e.pieces {
			if _, err := w.Write(p.bytes()); err != nil {
				return err
			}
		}
		return nil
	}
	be, bb := t.DType.BlockElems(), t.DType.BlockBytes()
	f := make([]float32, min(chunkElems, t.Elements()))
	var buf []byte
	for _, p := range e.pieces {
		raw := p.bytes()
		for len(raw) > 0 {
			n := min(len(raw)/bb*be, chunkElems)
			if err := decodeInto(f[:n], raw[:n/be*bb], t.DType); err != nil {
				return err
			}
			if buf, err = encode(buf[:0], f[:n], out); err != nil {
				return err
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
			raw = raw[n/be*bb:]
		}
	}
	return nil
}

// WriteGGUFFile writes ck to path atomically (see WriteGGUFFileContext).
func WriteGGUFFile(path string, ck Checkpoint, opt WriteOptions) error {
	return WriteGGUFFileContext(context.Background(), path, ck, opt)
}

func writeString(b *bytes.Buffer, s string) {
	binary.Write(b, binary.LittleEndian, uint64(len(s)))
	b.WriteString(s)
}

// scalarType returns the GGUF type of a scalar Go value.
func scalarType(v any) (GGUFType, bool) {
	switch v.(type) {
	case uint8:
		return GGUFUint8, true
	case int8:
		return GGUFInt8, true
	case uint16:
		return GGUFUint16, true
	case int16:
		return GGUFInt16, true
	case uint32:
		return GGUFUint32, true
	case int32:
		return GGUFInt32, true
	case float32:
		return GGUFFloat32, true
	case bool:
		return GGUFBool, true
	case string:
		return GGUFString, true
	case uint64:
		return GGUFUint64, true
	case int64:
		return GGUFInt64, true
	case float64:
		return GGUFFloat64, true
	}
	return 0, false
}

// sliceElemType returns the element type of a slice value.
func sliceElemType(v any) (GGUFType, int, bool) {
	switch s := v.(type) {
	case []uint8:
		return GGUFUint8, len(s), true
	case []int8:
		return GGUFInt8, len(s), true
	case []uint16:
		return GGUFUint16, len(s), true
	case []int16:
		return GGUFInt16, len(s), true
	case []uint32:
		return GGUFUint32, len(s), true
	case []int32:
		return GGUFInt32, len(s), true
	case []float32:
		return GGUFFloat32, len(s), true
	case []bool:
		return GGUFBool, len(s), true
	case []string:
		return GGUFString, len(s), true
	case []uint64:
		return GGUFUint64, len(s), true
	case []int64:
		return GGUFInt64, len(s), true
	case []float64:
		return GGUFFloat64, len(s), true
	case []any:
		return GGUFArray, len(s), true
	}
	return 0, 0, false
}

// writeValue writes v, preceded by its type tag when tagged.
func writeValue(b *bytes.Buffer, v any, tagged bool) error {
	le := func(x any) { binary.Write(b, binary.LittleEndian, x) }
	if t, ok := scalarType(v); ok {
		if tagged {
			le(uint32(t))
		}
		switch x := v.(type) {
		case string:
			writeString(b, x)
		case bool:
			if x {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		default:
			le(x)
		}
		return nil
	}
	et, n, ok := sliceElemType(v)
	if !ok {
		return fmt.Errorf("value of type %T has no GGUF encoding", v)
	}
	if tagged {
		le(uint32(GGUFArray))
	}
	le(uint32(et))
	le(uint64(n))
	switch s := v.(type) {
	case []string:
		for _, x := range s {
			writeString(b, x)
		}
	case []bool:
		for _, x := range s {
			writeValue(b, x, false)
		}
	case []any:
		for _, x := range s {
			if _, _, ok := sliceElemType(x); !ok {
				return errors.New("nested array element is not an array")
			}
			if err := writeValue(b, x, false); err != nil {
				return err
			}
		}
	default:
		le(s)
	}
	return nil
}
