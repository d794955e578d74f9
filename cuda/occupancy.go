package cuda

import "fmt"

// SMLimits are the resources of one streaming multiprocessor that bound
// how many blocks it holds at once: the inputs of CUDA's occupancy
// calculator (cuda_occupancy.h), whose rules Fit follows for blocks of one
// kernel. Blocks of two kernels together it counts the same way, each warp
// on the sub-partition holding the fewest registers: the hardware's own
// placement is not documented, so that is a model.
type SMLimits struct {
	Registers      int // 32-bit registers, split evenly over SubPartitions
	SubPartitions  int // a warp's registers come from one of them
	RegisterUnit   int // registers go to a warp in multiples of this many
	Shared         int // shared memory for blocks, bytes
	SharedUnit     int // a block's shared memory is rounded up to this many bytes
	SharedReserved int // bytes the system takes per block
	Threads        int
	MaxBlocks      int
}

// SM90 is an H100's or H200's multiprocessor (compute capability 9.0).
var SM90 = SMLimits{Registers: 65536, SubPartitions: 4, RegisterUnit: 256, Shared: 228 << 10, SharedUnit: 128,
	SharedReserved: 1 << 10, Threads: 2048, MaxBlocks: 32}

// BlockShape is one block of a launch as an SM holds it.
type BlockShape struct {
	Threads   int
	Registers int // per thread
	Shared    int // bytes: static plus the launch's dynamic
}

// SMLoad is what blocks already resident on one SM hold.
type SMLoad struct {
	RegWarp []int // registers its warps hold, per sub-partition
	Shared  int
	Threads int
	Blocks  int
}

// Shape is a block of threads threads and dynamic bytes of dynamic shared
// memory of a kernel using r: its static shared memory is its section less
// the system's reserve the section starts with (Fit counts that reserve
// for every block, whether the kernel has a section or not).
func (l SMLimits) Shape(r KernelResources, threads, dynamic int) BlockShape {
	return BlockShape{Threads: threads, Registers: r.Registers, Shared: dynamic + max(r.SharedSection-l.SharedReserved, 0)}
}

func (l SMLimits) warps(b BlockShape) int { return (b.Threads + 31) / 32 }

// regsPerWarp is a warp's register allocation: its threads' registers
// rounded up to the allocation unit.
func (l SMLimits) regsPerWarp(b BlockShape) int {
	return (b.Registers*32 + l.RegisterUnit - 1) / l.RegisterUnit * l.RegisterUnit
}

func (l SMLimits) shared(b BlockShape) int {
	return (b.Shared + l.SharedReserved + l.SharedUnit - 1) / l.SharedUnit * l.SharedUnit
}

// Add places n blocks of b on s, their warps over the sub-partitions in
// turn, each warp on the one holding the fewest registers.
func (l SMLimits) Add(s SMLoad, b BlockShape, n int) SMLoad {
	if s.RegWarp == nil {
		s.RegWarp = make([]int, l.SubPartitions)
	} else {
		s.RegWarp = append([]int(nil), s.RegWarp...)
	}
	r := l.regsPerWarp(b)
	for range n {
		for range l.warps(b) {
			p := 0
			for i := range s.RegWarp {
				if s.RegWarp[i] < s.RegWarp[p] {
					p = i
				}
			}
			s.RegWarp[p] += r
		}
		s.Shared += l.shared(b)
		s.Threads += b.Threads
		s.Blocks++
	}
	return s
}

// fits reports whether one more block of b fits on s, and if not which
// resource is short.
func (l SMLimits) fits(s SMLoad, b BlockShape) (bool, string) {
	switch {
	case s.Blocks+1 > l.MaxBlocks:
		return false, "blocks"
	case s.Threads+b.Threads > l.Threads:
		return false, "threads"
	case s.Shared+l.shared(b) > l.Shared:
		return false, "shared"
	}
	t := l.Add(s, b, 1)
	for _, r := range t.RegWarp {
		if r > l.Registers/l.SubPartitions {
			return false, "registers"
		}
	}
	return true, ""
}

// Fit is how many more blocks of b fit on an SM already holding s, and
// the resource that stops the next one.
func (l SMLimits) Fit(s SMLoad, b BlockShape) (int, string, error) {
	if b.Threads < 1 || b.Registers < 0 || b.Shared < 0 {
		return 0, "", fmt.Errorf("occupancy: block of %d threads, %d registers a thread, %d bytes of shared memory", b.Threads, b.Registers, b.Shared)
	}
	if ok, why := l.fits(SMLoad{}, b); !ok {
		return 0, why, fmt.Errorf("occupancy: one block of %d threads, %d registers a thread and %d bytes of shared memory exceeds an SM's %s",
			b.Threads, b.Registers, b.Shared, why)
	}
	n := 0
	for {
		ok, why := l.fits(s, b)
		if !ok {
			return n, why, nil
		}
		s = l.Add(s, b, 1)
		n++
	}
}
