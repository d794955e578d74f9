package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"lagc/cuda"
	"lagc/lower"
)

// Recorder is a Queue that keeps every launch and copy made on it, in
// order, and passes each on to Next when that is set (recording a real
// run) or drops it (a dry run).
type Recorder struct {
	Next   Queue
	Events []Event
}

// Event is one recorded launch or copy.
type Event struct {
	Kind        string // launch, memcpy, upload, download or memset32
	Kernel      string // launch: the instantiation, e.g. "gemv<bf16_t, bf16_t, bf16_t, 1, 0, 1>"
	Grid, Block cuda.Dim3
	Shmem       int
	Args        []any          // launch: as passed
	Dst, Src    cuda.DevicePtr // copies and memset
	Bytes       int64          // copies: bytes; memset32: words
	Value       uint32         // memset32
}

// Reset forgets the events recorded so far.
func (r *Recorder) Reset() { r.Events = r.Events[:0] }

// Launch records a launch.
func (r *Recorder) Launch(k *cuda.Kernel, grid, block cuda.Dim3, shmem int, args ...any) error {
	if k == nil {
		return fmt.Errorf("gpu: launch of a nil kernel")
	}
	r.Events = append(r.Events, Event{Kind: "launch", Kernel: k.NameExpr, Grid: grid, Block: block, Shmem: shmem,
		Args: append([]any(nil), args...)})
	if r.Next != nil {
		return r.Next.Launch(k, grid, block, shmem, args...)
	}
	return nil
}

// CopyDtoD records a device-to-device copy.
func (r *Recorder) CopyDtoD(dst, src cuda.DevicePtr, n int64) error {
	r.Events = append(r.Events, Event{Kind: "memcpy", Dst: dst, Src: src, Bytes: n})
	if r.Next != nil {
		return r.Next.CopyDtoD(dst, src, n)
	}
	return nil
}

// CopyHtoD records an upload.
func (r *Recorder) CopyHtoD(dst cuda.DevicePtr, src []byte) error {
	r.Events = append(r.Events, Event{Kind: "upload", Dst: dst, Bytes: int64(len(src))})
	if r.Next != nil {
		return r.Next.CopyHtoD(dst, src)
	}
	return nil
}

// CopyDtoH records a download; on a dry run dst is zeroed.
func (r *Recorder) CopyDtoH(dst []byte, src cuda.DevicePtr) error {
	r.Events = append(r.Events, Event{Kind: "download", Src: src, Bytes: int64(len(dst))})
	if r.Next != nil {
		return r.Next.CopyDtoH(dst, src)
	}
	clear(dst)
	return nil
}

// Memset32 records a memset.
func (r *Recorder) Memset32(dst cuda.DevicePtr, v uint32, n int64) error {
	r.Events = append(r.Events, Event{Kind: "memset32", Dst: dst, Bytes: n, Value: v})
	if r.Next != nil {
		return r.Next.Memset32(dst, v, n)
	}
	return nil
}

// GEMMLt records a cuBLASLt GEMM as a launch of lower.CublasLtGEMM.
func (r *Recorder) GEMMLt(l *cuda.Lt, T, N, K int, x, w, y cuda.DevicePtr, yt cuda.DType, accumulate bool) error {
	acc := int32(0)
	if accumulate {
		acc = 1
	}
	r.Events = append(r.Events, Event{Kind: "launch", Kernel: lower.CublasLtName(yt.String()),
		Args: []any{int32(T), int32(N), int32(K), x, w, y, acc}})
	if r.Next != nil {
		return r.Next.GEMMLt(l, T, N, K, x, w, y, yt, accumulate)
	}
	return nil
}

// region is a named span of the executor's memory; pointers into it are
// written as name+offset.
type region struct {
	name  string
	start cuda.DevicePtr
	size  int64
}

// regions lists the executor's memory by purpose.
func (e *Executor) regions() []region {
	p := e.plan
	return []region{
		{lower.BaseWeights, e.weights, p.WeightBytes},
		{lower.BaseKV, e.kvMem, int64(p.SeqSlots()) * p.KVSeqBytes()},
		{lower.BaseArena, e.arena, e.arenaBytes},
		{lower.BaseWorkspace, e.ws, e.wsBytes},
		{lower.BaseRoutes, e.routes, e.routesBytes},
		{lower.BaseTokens, e.tokens, align(4 * int64(max(p.Prefill.Tokens, 1)))},
		{lower.BasePos, e.pos, align(4 * int64(max(p.Prefill.Tokens, 1)))},
		{lower.BaseSeq, e.seq, align(4 * int64(max(p.Prefill.Tokens, 1)))},
		{lower.BaseSync, e.sync, e.syncBytes},
		{lower.BaseRope, e.ropes, p.RopeBytes},
		{lower.BaseOut, e.out, lower.OutBytes},
		{lower.BaseKept, e.kept, e.keptBytes},
		{lower.BaseShadow, e.shadows, p.ShadowBytes},
	}
}

// Symbol writes a pointer as region+offset ("arena+4096"), "null" for 0.
func (e *Executor) Symbol(ptr cuda.DevicePtr) string {
	if ptr == 0 {
		return "null"
	}
	var at *region
	for _, r := range e.regions() {
		if r.start == 0 || ptr < r.start {
			continue
		}
		if int64(ptr-r.start) < r.size || (ptr == r.start && at == nil) {
			r := r
			at = &r
		}
	}
	if at == nil {
		return fmt.Sprintf("%#x", uint64(ptr))
	}
	return fmt.Sprintf("%s+%d", at.name, int64(ptr-at.start))
}

// Format writes an event as one line, its pointers as Symbol does.
func (e *Executor) Format(ev Event) string {
	switch ev.Kind {
	case "launch":
		args := make([]string, len(ev.Args))
		for i, a := range ev.Args {
			args[i] = e.formatArg(a)
		}
		if strings.HasPrefix(ev.Kernel, lower.CublasLtGEMM+"<") { // no geometry: as lower.Launch.String prints it
			return fmt.Sprintf("%s (%s)", ev.Kernel, strings.Join(args, ", "))
		}
		return fmt.Sprintf("%s grid %d,%d,%d block %d,%d,%d shmem %d (%s)", ev.Kernel, ev.Grid.X, ev.Grid.Y, ev.Grid.Z,
			ev.Block.X, ev.Block.Y, ev.Block.Z, ev.Shmem, strings.Join(args, ", "))
	case "memcpy":
		return fmt.Sprintf("memcpy %s <- %s, %d bytes", e.Symbol(ev.Dst), e.Symbol(ev.Src), ev.Bytes)
	case "upload":
		return fmt.Sprintf("upload %s, %d bytes", e.Symbol(ev.Dst), ev.Bytes)
	case "download":
		return fmt.Sprintf("download %s, %d bytes", e.Symbol(ev.Src), ev.Bytes)
	case "memset32":
		return fmt.Sprintf("memset32 %s = %#x, %d words", e.Symbol(ev.Dst), ev.Value, ev.Bytes)
	}
	return "unknown event " + ev.Kind
}

func (e *Executor) formatArg(a any) string {
	switch v := a.(type) {
	case cuda.DevicePtr:
		return e.Symbol(v)
	case int32:
		return "i32 " + strconv.FormatInt(int64(v), 10)
	case int64:
		return "i64 " + strconv.FormatInt(v, 10)
	case uint32:
		return "u32 " + strconv.FormatUint(uint64(v), 10)
	case float32:
		return "f32 " + strconv.FormatFloat(float64(v), 'g', -1, 32)
	case cuda.TensorMapArg:
		return v.Desc
	}
	return fmt.Sprintf("%T %v", a, a)
}
