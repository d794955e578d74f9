package cpu

import "fmt"

// Embedding gathers rows of table [V,H] into out [T,H] for tokens ids [T].
// An id outside [0, V) is an error (a prompt id out of the vocabulary).
func Embedding(out []float32, ids []int32, table []float32, V, H int) error {
	if err := checkDims("Embedding", dim{"V", V}, dim{"H", H}); err != nil {
		return err
	}
	if err := checkLen("Embedding", "table", len(table), V, H); err != nil {
		return err
	}
	return embedding(out, ids, MatrixF32(table, V, H))
}

// embedding is Embedding on a table of any stored type: each token's row
// is converted straight into out.
func embedding(out []float32, ids []int32, table *Matrix) error {
	if table == nil {
		return fmt.Errorf("cpu.Embedding: no table")
	}
	T, V, H := len(ids), table.Rows, table.Cols
	if err := checkDims("Embedding", dim{"V", V}, dim{"H", H}); err != nil {
		return err
	}
	if err := table.check("Embedding", "table", V, H); err != nil {
		return err
	}
	if err := checkLen("Embedding", "out", len(out), T, H); err != nil {
		return err
	}
	for t, id := range ids {
		if id < 0 || int(id) >= V {
			return fmt.Errorf("cpu.Embedding: token %d (at %d) is outside the vocabulary [0, %d)", id, t, V)
		}
		row := out[t*H : t*H+H]
		if r := table.rowsF32(row, int(id), int(id)+1); &r[0] != &row[0] {
			copy(row, r)
		}
	}
	return nil
}
