package lower

import (
	"fmt"
	"strconv"
	"strings"

	"lagc/cuda"
)

// Launch is one kernel launch, complete: the instantiation (template Kernel
// of File with type arguments DTypes then integer arguments Ints), its
// geometry and its argument list. A Launch whose Kernel is Memcpy is a
// device-to-device copy instead: Args are the destination, the source and
// the byte count (i64).
type Launch struct {
	Kernel string   `json:"kernel"`
	File   string   `json:"file,omitempty"`
	DTypes []string `json:"dtypes,omitempty"`
	Ints   []int64  `json:"ints,omitempty"`
	Grid   [3]int   `json:"grid"`
	Block  [3]int   `json:"block"`
	Shmem  int      `json:"shmem"` // dynamic shared memory, bytes
	Args   []Arg    `json:"args"`
}

// Memcpy is the Kernel of a Launch that copies device memory.
const Memcpy = "memcpy"

// Memory regions a pointer argument lies in. An executor places each and
// binds base+offset to an address; every base is Alignment-aligned.
const (
	BaseArena     = "arena"     // activations at the schedule's offsets
	BaseWeights   = "weights"   // Plan.Weights at their offsets
	BaseKV        = "kv"        // Plan.KV at their offsets
	BaseWorkspace = "workspace" // scratch of Schedule.Workspace bytes
	BaseRoutes    = "routes"    // moe_grouped's routes with the shared experts, Schedule.Routes bytes
	BaseTokens    = "tokens"    // the step's token ids, i32 [T]
	BasePos       = "pos"       // their positions, i32 [T]
	BaseRope      = "rope"      // Plan.Ropes at their offsets
	BaseShadow    = "shadow"    // Plan.Shadows at their offsets
	// BaseOut is the decode step's readback, OutBytes of host memory the
	// kernels write to (pinned and mapped): by the step's position p, its
	// argmax and the bits of that logit as two i32 at 8*(p&1) (step_next).
	// BaseKept keeps its row of logits, f32 [V] at 4*V*(p&1) (argmax),
	// KeptBytes on the device. Both lie apart from the arena, so that a
	// step queued behind it leaves them alone.
	BaseOut  = "out"
	BaseKept = "kept"
	// BaseSync holds the counters blocks of one launch meet at (the split
	// decode attention's, the fused router's), Schedule.Sync bytes: zeroed
	// once by the executor, and every launch leaves them zero.
	BaseSync = "sync"
	// BaseDevice is address 0: offsets are device addresses (kernels
	// launched directly on buffers a caller owns).
	BaseDevice = "device"
)

// Ptr is a pointer argument: Offset bytes into a region. The zero Ptr is
// the null pointer.
type Ptr struct {
	Base   string
	Offset int64
}

// At returns the pointer n bytes further.
func (p Ptr) At(n int64) Ptr { return Ptr{p.Base, p.Offset + n} }

// Null reports whether p is the null pointer.
func (p Ptr) Null() bool { return p.Base == "" }

// Aligned reports whether p is a multiple of n bytes (n divides Alignment).
func (p Ptr) Aligned(n int64) bool { return p.Offset%n == 0 }

func (p Ptr) String() string {
	if p.Null() {
		return "null"
	}
	return p.Base + "+" + strconv.FormatInt(p.Offset, 10)
}

// DevicePtr is the Ptr of a device address (0: null).
func DevicePtr(addr uint64) Ptr {
	if addr == 0 {
		return Ptr{}
	}
	return Ptr{BaseDevice, int64(addr)}
}

// Arg is one kernel argument: a pointer, a scalar of its C type, or a TMA
// tensor map over the matrix at a pointer.
type Arg struct {
	Kind   string  `json:"kind"` // ptr, i32, i64, u32, f32 or tmap
	Base   string  `json:"base,omitempty"`
	Offset int64   `json:"offset,omitempty"`
	Int    int64   `json:"int,omitempty"`   // i32, i64, u32
	Float  float32 `json:"float,omitempty"` // f32
	Map    *TMap   `json:"map,omitempty"`   // tmap
}

// TMap is a TMA tensor map (CUtensorMap) over the row-major matrix at an
// Arg's pointer, which the executor encodes when it binds the launch: the
// kernel reads it in boxes of BoxRows x BoxCols elements.
type TMap struct {
	Elem    string `json:"elem"` // bf16 or f16 (128-byte swizzled boxes) or u8 (bytes, unswizzled)
	Rows    int64  `json:"rows"`
	Cols    int64  `json:"cols"`
	LD      int64  `json:"ld"` // elements from one row to the next
	BoxRows int    `json:"box_rows"`
	BoxCols int    `json:"box_cols"`
}

// Arg kinds.
const (
	ArgPtr  = "ptr"
	ArgI32  = "i32"
	ArgI64  = "i64"
	ArgU32  = "u32"
	ArgF32  = "f32"
	ArgTMap = "tmap"
)

func ptrArg(p Ptr) Arg { return Arg{Kind: ArgPtr, Base: p.Base, Offset: p.Offset} }
func tmapArg(p Ptr, m TMap) Arg {
	return Arg{Kind: ArgTMap, Base: p.Base, Offset: p.Offset, Map: &m}
}
func i32(v int) Arg        { return Arg{Kind: ArgI32, Int: int64(v)} }
func i64(v int64) Arg      { return Arg{Kind: ArgI64, Int: v} }
func u32(v uint32) Arg     { return Arg{Kind: ArgU32, Int: int64(v)} }
func f32(v float32) Arg    { return Arg{Kind: ArgF32, Float: v} }
func ceilDiv(a, b int) int { return (a + b - 1) / b }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Ptr returns a pointer argument's pointer.
func (a Arg) Ptr() Ptr { return Ptr{a.Base, a.Offset} }

func (a Arg) String() string {
	switch a.Kind {
	case ArgPtr:
		return a.Ptr().String()
	case ArgF32:
		return "f32 " + strconv.FormatFloat(float64(a.Float), 'g', -1, 32)
	case ArgTMap:
		if a.Map == nil {
			return "tmap(" + a.Ptr().String() + ", ?)"
		}
		m := a.Map
		return fmt.Sprintf("tmap(%s, %s %dx%d ld %d, box %dx%d)", a.Ptr(), m.Elem, m.Rows, m.Cols, m.LD, m.BoxRows, m.BoxCols)
	}
	return a.Kind + " " + strconv.FormatInt(a.Int, 10)
}

// NameExpr is the C++ instantiation, e.g. "gemv<bf16_t, bf16_t, float, 1, 0, 1>".
func (l Launch) NameExpr() string {
	spec := cuda.KernelSpec{Name: l.Kernel, Ints: l.Ints}
	for _, s := range l.DTypes {
		dt, err := cuda.ParseDType(s)
		if err != nil {
			return l.Kernel + "<" + strings.Join(l.DTypes, ", ") + "?>"
		}
		spec.DTypes = append(spec.DTypes, dt)
	}
	return spec.NameExpr()
}

// String writes the launch as one line, as a recorded launch prints:
// instantiation, grid, block, shared memory, arguments.
func (l Launch) String() string {
	args := make([]string, len(l.Args))
	for i, a := range l.Args {
		args[i] = a.String()
	}
	if l.Kernel == Memcpy && len(l.Args) == 3 {
		return fmt.Sprintf("memcpy %s <- %s, %d bytes", args[0], args[1], l.Args[2].Int)
	}
	if l.Kernel == CublasLtGEMM && len(l.DTypes) == 1 {
		return fmt.Sprintf("%s (%s)", CublasLtName(l.DTypes[0]), strings.Join(args, ", "))
	}
	return fmt.Sprintf("%s grid %d,%d,%d block %d,%d,%d shmem %d (%s)", l.NameExpr(), l.Grid[0], l.Grid[1], l.Grid[2],
		l.Block[0], l.Block[1], l.Block[2], l.Shmem, strings.Join(args, ", "))
}

// memcpy is a device-to-device copy of n bytes.
func memcpy(dst, src Ptr, n int64) Launch {
	return Launch{Kernel: Memcpy, Args: []Arg{ptrArg(dst), ptrArg(src), i64(n)}}
}

// kernel builds a launch of kernel name in file.
func kernel(file, name string, dtypes []string, ints []int64, grid, block [3]int, shmem int, args ...Arg) Launch {
	return Launch{Kernel: name, File: file, DTypes: dtypes, Ints: ints, Grid: grid, Block: block, Shmem: shmem, Args: args}
}

func dims(xyz ...int) [3]int {
	d := [3]int{1, 1, 1}
	copy(d[:], xyz)
	return d
}

// Grid-stride kernels: 256 threads a block, at most 8192 blocks.
const (
	strideThreads = 256
	strideBlocks  = 8192
)

// grid1D is the geometry of a grid-stride loop over n elements.
func grid1D(n int64) (grid, block [3]int) {
	b := max(1, min((n+strideThreads-1)/strideThreads, strideBlocks))
	return dims(int(b)), dims(strideThreads)
}
