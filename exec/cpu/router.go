package cpu

import (
	"fmt"
	"math"
)

// RouterTopK is the MoE router: for each token's logits [E] (float32),
// optionally soft-capped (softcap > 0: c*tanh(l/c)), s = sigmoid(l); the
// top k experts by s + bias are chosen (the bias only chooses; nil means no
// bias), and their weights are s / sum(chosen s) * scaling. Outputs are
// weights [T,k] and ids [T,k], best first.
//
// Ties in s + bias go to the lower expert index, as torch.topk on CPU does
// in practice (it does not promise an order); NaN ranks above every number.
func RouterTopK(weights []float32, ids []int32, logits, bias []float32, T, E, k int, softcap, scaling float32) error {
	if err := checkDims("RouterTopK", dim{"T", T}, dim{"E", E}, dim{"top_k", k}); err != nil {
		return err
	}
	if k > E {
		return fmt.Errorf("cpu.RouterTopK: top_k = %d exceeds the %d experts", k, E)
	}
	if err := checkLen("RouterTopK", "logits", len(logits), T, E); err != nil {
		return err
	}
	if bias != nil {
		if err := checkLen("RouterTopK", "bias", len(bias), E); err != nil {
			return err
		}
	}
	if err := checkLen("RouterTopK", "weights", len(weights), T, k); err != nil {
		return err
	}
	if err := checkLen("RouterTopK", "ids", len(ids), T, k); err != nil {
		return err
	}
	score := make([]float32, E)
	sel := make([]float32, E)
	taken := make([]bool, E)
	for t := 0; t < T; t++ {
		for e, l := range logits[t*E : (t+1)*E] {
			if softcap > 0 {
				l = float32(math.Tanh(float64(l/softcap))) * softcap
			}
			score[e] = sigmoid(l)
			sel[e] = score[e]
			if bias != nil {
				sel[e] += bias[e]
			}
			taken[e] = false
		}
		wr, ir := weights[t*k:(t+1)*k], ids[t*k:(t+1)*k]
		var sum float32
		for j := 0; j < k; j++ {
			best := -1
			for e := 0; e < E; e++ {
				if !taken[e] && (best < 0 || greater(sel[e], sel[best])) {
					best = e
				}
			}
			taken[best] = true
			ir[j] = int32(best)
			wr[j] = score[best]
			sum += score[best]
		}
		for j := range wr {
			wr[j] = wr[j] / sum * scaling
		}
	}
	return nil
}

func sigmoid(x float32) float32 {
	return float32(1 / (1 + math.Exp(-float64(x))))
}
