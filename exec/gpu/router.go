package gpu

import (
	"fmt"

	"lagc/cuda"
)

// RouterTopK is the MoE router on the device, one block per token (a
// thread per expert up to 1024 experts, k selection rounds of one barrier
// each; see router.cu): logits
// [T, E] of dtype dt (float32 from the router GEMM normally), optionally
// soft-capped (softcap > 0), s = sigmoid; the top topK experts by s + bias
// (bias float32 [E], or 0 for none; it only chooses) are written best first
// to ids int32 [T, topK], with weights float32 [T, topK] = s / sum(chosen
// s) * scaling. It makes exactly the choices of exec/cpu.RouterTopK on the
// same float32 inputs (ties to the lower index).
func (k *Kernels) RouterTopK(s Queue, dt cuda.DType, weights, ids, logits, bias cuda.DevicePtr, T, E, topK int, softcap, scaling float32) error {
	const op = "RouterTopK"
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := checkPos(op, "T", T, "E", E, "top_k", topK); err != nil {
		return err
	}
	if topK > E {
		return fmt.Errorf("gpu.%s: top_k = %d exceeds the %d experts", op, topK, E)
	}
	if !(softcap >= 0) {
		return fmt.Errorf("gpu.%s: softcap = %g must not be negative", op, softcap)
	}
	if err := checkPtrs(op, "weights", weights, "ids", ids, "logits", logits); err != nil {
		return err
	}
	kn, err := k.op("router.cu", "router_topk", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	shmem := routerShared(E, topK)
	if max := k.props().MaxSharedPerBlock; shmem > max && max > 0 {
		return fmt.Errorf("gpu.%s: %d experts need %d bytes of shared memory", op, E, shmem)
	}
	if err := k.allowShared(kn, shmem); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if err := s.Launch(kn, cuda.Dim(uint32(T)), cuda.Dim(uint32(routerThreads(E))), shmem,
		int32(T), int32(E), int32(topK), softcap, scaling, logits, int64(E), bias, weights, ids); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}

// routerThreads is router_topk's block: a thread per expert, at most 1024
// (more experts take several per thread).
func routerThreads(E int) int { return min(1024, 32*ceilDiv(E, 32)) }

// routerShared is router_topk's dynamic shared memory: a 64-bit selection
// key and a float score per expert, and the k chosen indices.
func routerShared(E, topK int) int { return 12*E + 4*topK }
