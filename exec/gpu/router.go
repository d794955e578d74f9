package gpu

import (
	"lagc/cuda"
	"lagc/lower"
)

// RouterTopK is the MoE router on the device, a warp per token with the
// scores in registers up to 1024 experts and 32 choices, a block per token
// beyond (see router.cu): logits
// [T, E] of dtype dt (float32 from the router GEMM normally), optionally
// soft-capped (softcap > 0), s = sigmoid; the top topK experts by s + bias
// (bias float32 [E], or 0 for none; it only chooses) are written best first
// to ids int32 [T, topK], with weights float32 [T, topK] = s / sum(chosen
// s) * scaling. It makes exactly the choices of exec/cpu.RouterTopK on the
// same float32 inputs (ties to the lower index).
func (k *Kernels) RouterTopK(s Queue, dt cuda.DType, weights, ids, logits, bias cuda.DevicePtr, T, E, topK int, softcap, scaling float32) error {
	return k.on(s).one(lower.RouterTopK(dt.String(), ptr(weights), ptr(ids), ptr(logits), ptr(bias), T, E, topK, softcap, scaling))
}
