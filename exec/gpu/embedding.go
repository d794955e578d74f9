package gpu

import (
	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// Embedding gathers rows of table [V,H] into out [T,H] for the T token ids
// in device memory at tokens (int32; the previous step's ArgMax writes
// there, so a captured decode graph serves every step). table and out are
// of dtype dt. A kernel cannot fail: an id outside [0, V) gives a NaN row
// (the host checks prompt ids before upload). T must be at most 65535 per
// launch.
func (k *Kernels) Embedding(s Queue, dt cuda.DType, out, tokens, table cuda.DevicePtr, T, V, H int) error {
	return k.on(s).one(lower.Embedding(dt.String(), ptr(out), ptr(tokens), ptr(table), T, V, H))
}

// QEmbedding is Embedding with a block-quantised table [V, H] of type t in
// the device layout (uploadQuant's, RepackQuant's): the rows it reads
// dequantised as QDequant does.
func (k *Kernels) QEmbedding(s Queue, t quant.Type, dt cuda.DType, out, tokens, table cuda.DevicePtr, T, V, H int) error {
	return k.on(s).one(lower.QEmbedding(t, dt.String(), ptr(out), ptr(tokens), ptr(table), T, V, H))
}
