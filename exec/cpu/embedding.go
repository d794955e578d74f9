package cpu

import "fmt"

// Embedding gathers rows of table [V,H] into out [T,H] for tokens ids [T].
// An id outside [0, V) is an error (a prompt id out of the vocabulary).
func Embedding(out []float32, ids []int32, table []float32, V, H int) error {
	T := len(ids)
	if err := checkDims("Embedding", dim{"V", V}, dim{"H", H}); err != nil {
		return err
	}
	if err := checkLen("Embedding", "table", len(table), V, H); err != nil {
		return err
	}
	if err := checkLen("Embedding", "out", len(out), T, H); err != nil {
		return err
	}
	for t, id := range ids {
		if id < 0 || int(id) >= V {
			return fmt.Errorf("cpu.Embedding: token %d (at %d) is outside the vocabulary [0, %d)", id, t, V)
		}
		copy(out[t*H:t*H+H], table[int(id)*H:int(id)*H+H])
	}
	return nil
}
