package tokenizer

import (
	"container/heap"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel is a byte-level BPE vocabulary with merges applied by rank, as
// HF tokenizers' BPE model does (lowest rank first, leftmost on ties).
type bpeModel struct {
	vocab        map[string]int32
	merges       map[[2]int32]merge
	ignoreMerges bool  // a word found whole in the vocabulary skips merging
	unk          int32 // -1: unknown symbols are dropped, as HF does without unk_token

	mu    sync.Mutex
	cache map[string][]int32
}

type merge struct {
	rank  int32
	newID int32
}

const maxCacheEntries = 1 << 16

// newBPE builds the merge table. Each merge is a pair of vocabulary strings
// whose concatenation must itself be in the vocabulary.
func newBPE(vocab map[string]int32, merges [][2]string, unk int32, ignoreMerges bool) (*bpeModel, error) {
	m := &bpeModel{
		vocab:        vocab,
		merges:       make(map[[2]int32]merge, len(merges)),
		ignoreMerges: ignoreMerges,
		unk:          unk,
		cache:        make(map[string][]int32),
	}
	for rank, pr := range merges {
		a, ok := vocab[pr[0]]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q not in vocabulary", rank, pr[0], pr[1], pr[0])
		}
		b, ok := vocab[pr[1]]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q not in vocabulary", rank, pr[0], pr[1], pr[1])
		}
		id, ok := vocab[pr[0]+pr[1]]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): result %q not in vocabulary", rank, pr[0], pr[1], pr[0]+pr[1])
		}
		key := [2]int32{a, b}
		if _, dup := m.merges[key]; !dup { // the first (lowest) rank wins, as in HF
			m.merges[key] = merge{rank: int32(rank), newID: id}
		}
	}
	return m, nil
}

// parseMergeString splits a merge in the "a b" form. Byte-level tokens never
// contain a plain space (it is mapped to U+0120), so the split is unambiguous.
func parseMergeString(s string) ([2]string, error) {
	a, b, ok := strings.Cut(s, " ")
	if !ok || a == "" || b == "" || strings.Contains(b, " ") {
		return [2]string{}, fmt.Errorf("merge %q is not of the form \"a b\"", s)
	}
	return [2]string{a, b}, nil
}

type symbol struct {
	id         int32
	prev, next int
	gone       bool
}

type mergeCand struct {
	pos   int
	rank  int32
	newID int32
}

type mergeHeap []mergeCand

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// encodeWord appends the ids of one pre-tokenized word, given in byte-level
// form, to out.
func (m *bpeModel) encodeWord(word string, out []int32) []int32 {
	if word == "" {
		return out
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(out, id)
		}
	}
	m.mu.Lock()
	ids, hit := m.cache[word]
	m.mu.Unlock()
	if hit {
		return append(out, ids...)
	}
	ids = m.mergeWord(word)
	m.mu.Lock()
	if len(m.cache) >= maxCacheEntries {
		clear(m.cache)
	}
	m.cache[word] = ids
	m.mu.Unlock()
	return append(out, ids...)
}

func (m *bpeModel) mergeWord(word string) []int32 {
	syms := make([]symbol, 0, utf8.RuneCountInString(word))
	for i, r := range word {
		ch := word[i : i+utf8.RuneLen(r)]
		id, ok := m.vocab[ch]
		if !ok {
			if m.unk < 0 {
				continue
			}
			id = m.unk
		}
		syms = append(syms, symbol{id: id, prev: len(syms) - 1, next: len(syms) + 1})
	}
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1
	h := make(mergeHeap, 0, len(syms))
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[[2]int32{syms[i].id, syms[i+1].id}]; ok {
			h = append(h, mergeCand{pos: i, rank: mg.rank, newID: mg.newID})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		top := heap.Pop(&h).(mergeCand)
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		// Skip stale candidates: the pair at pos changed since it was queued.
		if mg, ok := m.merges[[2]int32{cur.id, right.id}]; !ok || mg.newID != top.newID {
			continue
		}
		cur.id = top.newID
		syms[cur.next].gone = true
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[[2]int32{syms[cur.prev].id, cur.id}]; ok {
				heap.Push(&h, mergeCand{pos: cur.prev, rank: mg.rank, newID: mg.newID})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[[2]int32{cur.id, syms[cur.next].id}]; ok {
				heap.Push(&h, mergeCand{pos: top.pos, rank: mg.rank, newID: mg.newID})
			}
		}
	}
	ids := make([]int32, 0, len(syms))
	for i := range syms {
		if !syms[i].gone {
			ids = append(ids, syms[i].id)
		}
	}
	return ids
}
