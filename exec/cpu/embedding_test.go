package cpu

import (
	"strings"
	"testing"
)

func TestEmbedding(t *testing.T) {
	const V, H = 5, 3
	table := make([]float32, V*H)
	for i := range table {
		table[i] = float32(i)
	}
	ids := []int32{4, 0, 4, 2}
	out := make([]float32, len(ids)*H)
	if err := Embedding(out, ids, table, V, H); err != nil {
		t.Fatal(err)
	}
	want := []float32{12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8}
	requireBitwise(t, "rows", out, want)

	for _, tc := range []struct {
		name string
		ids  []int32
		want string
	}{
		{"id = V", []int32{1, 5}, "token 5 (at 1) is outside the vocabulary [0, 5)"},
		{"negative", []int32{-1}, "token -1"},
	} {
		err := Embedding(make([]float32, len(tc.ids)*H), tc.ids, table, V, H)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := Embedding(make([]float32, 2), []int32{0}, table, V, H); err == nil {
		t.Error("short out accepted")
	}
	if err := Embedding(make([]float32, 3), []int32{0}, table[:14], V, H); err == nil {
		t.Error("short table accepted")
	}
}
