package cuda

import (
	"unsafe"

	"encoding/binary"
	"math"
	"strings"
	"testing"
)

func TestPackArgs(t *testing.T) {
	buf := make([]byte, 64)
	offs, err := packArgs(buf, nil, []any{DevicePtr(0x1122334455667788), int32(-2), float32(1.5), uint8(7), int64(9), RawArg{1, 2, 3}}, []int{8, 4, 4, 1, 8, 3}, "k")
	if err != nil {
		t.Fatal(err)
	}
	wantOffs := []int{0, 8, 16, 24, 32, 40}
	for i, o := range wantOffs {
		if offs[i] != o {
			t.Fatalf("offsets %v want %v", offs, wantOffs)
		}
	}
	if binary.LittleEndian.Uint64(buf[0:]) != 0x1122334455667788 ||
		int32(binary.LittleEndian.Uint32(buf[8:])) != -2 ||
		math.Float32frombits(binary.LittleEndian.Uint32(buf[16:])) != 1.5 ||
		buf[24] != 7 || binary.LittleEndian.Uint64(buf[32:]) != 9 || buf[40] != 1 || buf[42] != 3 {
		t.Errorf("packed bytes wrong: %v", buf)
	}
}

func TestPackArgsErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []any
		params []int
		bufLen int
		want   string
	}{
		{"go int", []any{5}, nil, 64, "pass int32 or int64"},
		{"uintptr", []any{uintptr(5)}, nil, 64, "pass int32 or int64"},
		{"string", []any{"x"}, nil, 64, "unsupported type string"},
		{"count", []any{int32(1)}, []int{4, 8}, 64, "takes 2 parameters, launch passed 1"},
		{"size", []any{int32(1)}, []int{8}, 64, "4 bytes, the kernel's parameter has 8"},
		{"overflow", []any{int64(1), int64(2)}, nil, 12, "exceed 12 bytes"},
	} {
		_, err := packArgs(make([]byte, c.bufLen), nil, c.args, c.params, "k")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

func TestDim(t *testing.T) {
	if d := Dim(5); d != (Dim3{5, 1, 1}) {
		t.Error(d)
	}
	if d := Dim(5, 6, 7); d != (Dim3{5, 6, 7}) {
		t.Error(d)
	}
	if d := (Dim3{X: 3}).norm(); d != (Dim3{3, 1, 1}) {
		t.Error(d)
	}
}

func TestArena(t *testing.T) {
	a := ArenaOver(DevicePtr(0x1000_0000+64), 4096) // base deliberately unaligned
	p1, err := a.Alloc(100)
	if err != nil || p1%ArenaAlign != 0 || p1 < a.Base() {
		t.Fatalf("first alloc %#x %v", p1, err)
	}
	m := a.Mark()
	p2, err := a.Alloc(1)
	if err != nil || p2%ArenaAlign != 0 || p2 < p1+100 {
		t.Fatalf("second alloc %#x %v", p2, err)
	}
	_, err = a.Alloc(8192)
	oom, ok := err.(*OOMError)
	if !ok || oom.Need != 8192 || oom.Total != 4096 || oom.Free >= 4096 || !strings.Contains(err.Error(), "8192 bytes") {
		t.Fatalf("want an arena OOMError with bytes needed and free, got %v", err)
	}
	a.Rewind(m)
	if p3, _ := a.Alloc(1); p3 != p2 {
		t.Errorf("rewind: got %#x want %#x", p3, p2)
	}
	peak := a.Peak()
	a.Reset()
	if a.Used() != 0 || a.Peak() != peak || a.Cap() != 4096 {
		t.Errorf("after reset used %d peak %d cap %d", a.Used(), a.Peak(), a.Cap())
	}
	if _, err := a.Alloc(0); err == nil {
		t.Error("zero-byte alloc should fail")
	}
	if err := a.Close(); err != nil {
		t.Error(err)
	}
}

func TestOOMErrorText(t *testing.T) {
	e := &OOMError{What: "device memory", Need: 1 << 40, Free: 140 << 30, Total: 141 << 30}
	s := e.Error()
	for _, w := range []string{"1099511627776 bytes (1.0 TiB) needed", "(140.0 GiB) free", "141.0 GiB"} {
		if !strings.Contains(s, w) {
			t.Errorf("%q lacks %q", s, w)
		}
	}
}

// TestLaunchConfigLayout: the cuLaunchKernelEx structs as cuda.h lays them
// out on 64-bit hosts (CUlaunchConfig 56 bytes, CUlaunchAttribute 72).
func TestLaunchConfigLayout(t *testing.T) {
	var c launchConfig
	var a launchAttr
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof CUlaunchConfig", unsafe.Sizeof(c), 56},
		{"hStream", unsafe.Offsetof(c.stream), 32},
		{"attrs", unsafe.Offsetof(c.attrs), 40},
		{"numAttrs", unsafe.Offsetof(c.numAttrs), 48},
		{"sizeof CUlaunchAttribute", unsafe.Sizeof(a), 72},
		{"value", unsafe.Offsetof(a.value), 8},
	} {
		if f.got != f.want {
			t.Errorf("%s: %d, want %d", f.name, f.got, f.want)
		}
	}
}
