package ckpt

import (
	"fmt"
	"math/big"
	"sort"
)

// byteSpan is a tensor's bytes [begin, end) in its file.
type byteSpan struct {
	name       string
	begin, end int64
}

// checkOverlaps rejects two tensors sharing bytes: writers pack tensors one
// after another, so aliasing means a corrupt or crafted file. Empty tensors
// and gaps between tensors are allowed.
func checkOverlaps(spans []byteSpan) error {
	s := make([]byteSpan, 0, len(spans))
	for _, sp := range spans {
		if sp.end > sp.begin {
			s = append(s, sp)
		}
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].begin != s[j].begin {
			return s[i].begin < s[j].begin
		}
		return s[i].name < s[j].name
	})
	// Sorted by start, any overlap shows between neighbours.
	for i := 1; i < len(s); i++ {
		prev := s[i-1]
		if s[i].begin < prev.end {
			return fmt.Errorf("tensor %s: its bytes [%d, %d) overlap those of tensor %s [%d, %d): the file is corrupt",
				s[i].name, s[i].begin, s[i].end, prev.name, prev.begin, prev.end)
		}
	}
	return nil
}

// ggufPastEnd describes a GGUF tensor whose bytes do not lie in the file,
// with the true range even where start + offset + size exceeds 64 bits.
func ggufPastEnd(name string, dataStart int64, offset uint64, size int64, fileLen int) error {
	b := new(big.Int).SetUint64(offset)
	b.Add(b, big.NewInt(dataStart))
	e := new(big.Int).Add(b, big.NewInt(size))
	return fmt.Errorf("tensor %s: its bytes [%s, %s) (offset %d in the data section) lie past the end of the file (%d bytes): the file is truncated or corrupt",
		name, b, e, offset, fileLen)
}
