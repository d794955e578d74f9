package passes

import (
	"fmt"
	"sort"

	"lagc/ir"
)

// Alignment of every buffer in the arena, in bytes.
const Alignment = 256

// maxArena bounds the bytes of a plan (1 EiB, beyond any machine), so that
// the offsets and sums below cannot overflow.
const maxArena = 1 << 60

// MemoryPlan places every activation (and graph input) of one step size in
// a single arena. A reshape output is a view: it shares its input's buffer.
// An output its op may write in place (ir.OpDef.InPlace) takes over that
// input's buffer when no later node reads the input: the kernels then
// accumulate into it instead of copying it first.
type MemoryPlan struct {
	Tokens int      // T
	DType  ir.DType // storage of float activations (integer ones keep theirs)
	Arena  int64    // bytes
	// PeakLive is the largest sum of simultaneously live buffers: no plan
	// can be smaller. NoReuse is the arena without any reuse.
	PeakLive, NoReuse int64
	Buffers           []Buffer
	byName            map[string]int
}

// Buffer is one value's place in the arena, live from node index First to
// Last of the topological order (-1: before the first node).
type Buffer struct {
	Value       string
	Offset      int64
	Size        int64
	First, Last int
	// View: the value shares the buffer of Owner, which it reshapes or,
	// InPlace, its node overwrites.
	View    bool
	InPlace bool
	Owner   string
}

// Offset returns the arena offset of the named value.
func (p *MemoryPlan) Offset(name string) (int64, bool) {
	i, ok := p.byName[name]
	if !ok {
		return 0, false
	}
	return p.Buffers[i].Offset, true
}

// Owner returns the value owning the named value's buffer: the value
// itself, or the one a view shares.
func (p *MemoryPlan) Owner(name string) (string, bool) {
	i, ok := p.byName[name]
	if !ok {
		return "", false
	}
	if b := p.Buffers[i]; b.View {
		return b.Owner, true
	}
	return name, true
}

// Plan returns the memory plan made for T tokens and float activations
// stored as dt, or nil.
func (s *State) Plan(tokens int, dt ir.DType) *MemoryPlan {
	for _, p := range s.Memory {
		if p.Tokens == tokens && p.DType == dt {
			return p
		}
	}
	return nil
}

func memPlan(s *State) error {
	tokens := s.Options.Tokens
	if len(tokens) == 0 {
		tokens = []int{1, 2048}
	}
	s.Memory = nil
	for _, t := range tokens {
		// f32 is what the graph holds; bf16 is what a GPU plan would keep.
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			p, err := PlanMemory(s.Graph, t, dt)
			if err != nil {
				return err
			}
			s.Memory = append(s.Memory, p)
			s.Notef("memplan: T=%d %s arena %d bytes (peak live %d, no reuse %d)", t, dt, p.Arena, p.PeakLive, p.NoReuse)
		}
	}
	return nil
}

// PlanMemory computes liveness over g's topological order and assigns
// offsets greedily, largest buffer first, at the lowest aligned offset not
// overlapping any placed buffer whose lifetime intersects.
func PlanMemory(g *ir.Graph, tokens int, floatAs ir.DType) (*MemoryPlan, error) {
	order, err := g.Order()
	if err != nil {
		return nil, err
	}
	env := g.Env(tokens)
	p := &MemoryPlan{Tokens: tokens, DType: floatAs, byName: map[string]int{}}
	root := map[*ir.Value]*ir.Value{} // view or in-place output -> the value it shares storage with
	idx := map[*ir.Value]int{}        // owner -> buffer index
	inPlace := map[string]bool{}
	size := func(v *ir.Value) (int64, error) {
		dt := v.Type.DType
		if dt.IsFloat() && !dt.IsQuantized() {
			dt = floatAs
		}
		n, err := v.Type.Shape.Elems(env)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", v, err)
		}
		return dt.Bytes(n), nil
	}
	add := func(v *ir.Value, first int) error {
		n, err := size(v)
		if err != nil {
			return err
		}
		idx[v] = len(p.Buffers)
		p.byName[v.Name] = len(p.Buffers)
		p.Buffers = append(p.Buffers, Buffer{Value: v.Name, Size: n, First: first, Last: first})
		return nil
	}
	// lastRead is the index of the last node reading a value (len(order):
	// a graph output); readBy, per buffer, the latest over the values
	// sharing it so far. A node may overwrite a buffer whose readBy is its
	// own index: no later node reads any value stored there.
	lastRead := map[*ir.Value]int{}
	for i, n := range order {
		for _, v := range n.Inputs {
			lastRead[v] = i
		}
	}
	for _, v := range g.Outputs {
		lastRead[v] = len(order)
	}
	read := func(v *ir.Value) int {
		if i, ok := lastRead[v]; ok {
			return i
		}
		return -1
	}
	readBy := map[int]int{}
	for _, v := range g.Inputs {
		if err := add(v, -1); err != nil {
			return nil, err
		}
		readBy[idx[v]] = read(v)
	}
	owner := func(v *ir.Value) *ir.Value {
		for root[v] != nil {
			v = root[v]
		}
		return v
	}
	for i, n := range order {
		for _, v := range n.Inputs {
			if b, ok := idx[owner(v)]; ok && p.Buffers[b].Last < i {
				p.Buffers[b].Last = i
			}
		}
		if n.Op == "reshape" && n.Inputs[0].Kind != ir.Weight {
			v := n.Outputs[0]
			root[v] = n.Inputs[0]
			b := idx[owner(v)]
			p.byName[v.Name] = b
			readBy[b] = max(readBy[b], read(v))
			continue
		}
		if r, ok := overwritten(n, owner); ok {
			v := n.Outputs[0]
			sz, err := size(v)
			if err != nil {
				return nil, err
			}
			// Not over a graph input (the caller fills it), nor a buffer
			// read later.
			if b, ok := idx[owner(r)]; ok && sz == p.Buffers[b].Size && p.Buffers[b].First >= 0 && readBy[b] <= i {
				root[v] = r
				p.byName[v.Name] = b
				readBy[b] = read(v)
				inPlace[v.Name] = true
				continue
			}
		}
		for _, v := range n.Outputs {
			if err := add(v, i); err != nil {
				return nil, err
			}
			readBy[idx[v]] = read(v)
		}
	}
	for _, v := range g.Outputs {
		if b, ok := idx[owner(v)]; ok {
			p.Buffers[b].Last = len(order)
		}
	}
	// Greedy placement, biggest first, against the placed buffers whose
	// lifetimes intersect (found once for all by a sweep over time, so the
	// cost is in the pairs that are live together, not in all pairs).
	overlaps := overlapping(p.Buffers)
	byIdx := make([]int, len(p.Buffers))
	for i := range byIdx {
		byIdx[i] = i
	}
	sort.SliceStable(byIdx, func(a, b int) bool { return p.Buffers[byIdx[a]].Size > p.Buffers[byIdx[b]].Size })
	placed := make([]bool, len(p.Buffers))
	var clash [][2]int64
	for _, bi := range byIdx {
		b := &p.Buffers[bi]
		size := align(b.Size)
		if size > maxArena-p.NoReuse {
			return nil, fmt.Errorf("at T=%d the activations need more than %d bytes", tokens, int64(maxArena))
		}
		clash = clash[:0]
		for _, oi := range overlaps[bi] {
			if placed[oi] {
				o := p.Buffers[oi]
				clash = append(clash, [2]int64{o.Offset, o.Offset + align(o.Size)})
			}
		}
		sort.Slice(clash, func(i, j int) bool { return clash[i][0] < clash[j][0] })
		off := int64(0)
		for _, c := range clash {
			if off+size <= c[0] {
				break
			}
			if c[1] > off {
				off = c[1]
			}
		}
		b.Offset = off
		placed[bi] = true
		if off+size > p.Arena {
			p.Arena = off + size
		}
		p.NoReuse += size
	}
	// Views take their owner's offset; they need no storage of their own.
	for name, bi := range p.byName {
		if o := p.Buffers[bi]; o.Value != name {
			p.Buffers = append(p.Buffers, Buffer{Value: name, Offset: o.Offset, Size: o.Size,
				First: o.First, Last: o.Last, View: true, InPlace: inPlace[name], Owner: o.Value})
		}
	}
	sort.SliceStable(p.Buffers, func(i, j int) bool {
		if p.Buffers[i].View != p.Buffers[j].View {
			return !p.Buffers[i].View
		}
		return p.Buffers[i].Value < p.Buffers[j].Value && p.Buffers[i].View
	})
	for i, b := range p.Buffers {
		p.byName[b.Value] = i
	}
	// Live bytes per step -1..len(order), as differences between steps.
	diff := make([]int64, len(order)+3)
	for _, b := range p.Buffers {
		if !b.View {
			diff[b.First+1] += align(b.Size)
			diff[b.Last+2] -= align(b.Size)
		}
	}
	var live int64
	for _, d := range diff {
		live += d
		p.PeakLive = max(p.PeakLive, live)
	}
	return p, nil
}

// overwritten returns the input whose buffer n's single output may take
// over (ir.OpDef.InPlace): an activation that shares no storage with n's
// other inputs, which the kernels read while they write the output.
func overwritten(n *ir.Node, owner func(*ir.Value) *ir.Value) (*ir.Value, bool) {
	d, ok := n.Def()
	if !ok || d.InPlace == nil || len(n.Outputs) != 1 {
		return nil, false
	}
	k := d.InPlace(n)
	if k < 0 || k >= len(n.Inputs) || n.Inputs[k].Kind == ir.Weight || !n.Inputs[k].Type.Equal(n.Outputs[0].Type) {
		return nil, false
	}
	r := owner(n.Inputs[k])
	for j, v := range n.Inputs {
		if j != k && owner(v) == r {
			return nil, false
		}
	}
	return n.Inputs[k], true
}

// overlapping lists, for each buffer, the buffers whose lifetimes
// [First, Last] intersect its own: a sweep in order of First keeps the
// buffers still live.
func overlapping(bs []Buffer) [][]int {
	byFirst := make([]int, len(bs))
	for i := range byFirst {
		byFirst[i] = i
	}
	sort.SliceStable(byFirst, func(a, b int) bool { return bs[byFirst[a]].First < bs[byFirst[b]].First })
	out := make([][]int, len(bs))
	var live []int
	for _, i := range byFirst {
		kept := live[:0]
		for _, j := range live {
			if bs[j].Last >= bs[i].First {
				kept = append(kept, j)
				out[i] = append(out[i], j)
				out[j] = append(out[j], i)
			}
		}
		live = append(kept, i)
	}
	return out
}

func align(n int64) int64 { return (n + Alignment - 1) / Alignment * Alignment }
