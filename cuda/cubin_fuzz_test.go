package cuda

import (
	"encoding/binary"
	"testing"
)

// FuzzCubinParamSizes: no input makes the cubin reader panic; what it
// accepts has a size for each parameter ordinal from 0 up.
func FuzzCubinParamSizes(f *testing.F) {
	f.Add([]byte{}, "k")
	f.Add([]byte("\x7fELF\x02\x01\x01\x33\x07\x00\x00\x00\x00\x00\x00\x00\x02\x00\xbe\x00\x7c\x00\x00\x00"), "k")
	f.Add(minimalCubin(nil), "k")
	f.Add(minimalCubin([]kparam{{1, 8}, {0, 4}}), "k")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		sizes, err := CubinParamSizes(data, name)
		if err != nil {
			return
		}
		for i, s := range sizes {
			if s < 0 {
				t.Fatalf("parameter %d has size %d", i, s)
			}
		}
	})
}

// TestCubinParamSizes reads the parameters of a hand-made cubin (an ELF
// file with one .nv.info.k section) and refuses broken ones.
func TestCubinParamSizes(t *testing.T) {
	good := minimalCubin([]kparam{{2, 128}, {0, 4}, {1, 8}})
	sizes, err := CubinParamSizes(good, "k")
	if err != nil || len(sizes) != 3 || sizes[0] != 4 || sizes[1] != 8 || sizes[2] != 128 {
		t.Fatalf("sizes %v, err %v; want [4 8 128]", sizes, err)
	}
	for _, c := range []struct {
		name string
		data []byte
		kern string
	}{
		{"not ELF", []byte("hello, world, not a cubin"), "k"},
		{"short", []byte{0x7f}, "k"},
		{"other kernel", good, "other"},
		{"gap in ordinals", minimalCubin([]kparam{{0, 4}, {2, 8}}), "k"},
	} {
		if _, err := CubinParamSizes(c.data, c.kern); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

type kparam struct{ ordinal, size int }

// minimalCubin is a 64-bit little-endian ELF file whose only sections are
// the null one, .shstrtab and .nv.info.k with an EIATTR_KPARAM_INFO record
// for each of ps (plus one 2-byte attribute before them, as ptxas writes).
func minimalCubin(ps []kparam) []byte {
	var info []byte
	info = append(info, 0x01, 0x2a, 0, 0) // EIFMT_NVAL, some attribute
	for _, p := range ps {
		rec := make([]byte, 16)
		rec[0], rec[1] = eifmtSVal, eiattrKParamInf
		binary.LittleEndian.PutUint16(rec[2:], 12)
		binary.LittleEndian.PutUint16(rec[8:], uint16(p.ordinal))
		binary.LittleEndian.PutUint32(rec[12:], uint32(p.size)<<18|0x1f000)
		info = append(info, rec...)
	}
	return testCubin(testSection{name: ".nv.info.k", typ: 0x70000000, data: info})
}

// testSection is a section of testCubin: its bytes, or for SHT_NOBITS
// (type 8) a size; link is sh_link (a symbol table's string table).
type testSection struct {
	name      string
	typ       uint32
	data      []byte
	size      int
	link, ent int
}

// testCubin is a 64-bit little-endian ELF file with CUDA's machine and
// e_version, the null section, secs (indices from 1) and .shstrtab last.
func testCubin(secs ...testSection) []byte {
	shstr := []byte{0}
	names := make([]int, len(secs)+1)
	for i, s := range secs {
		names[i] = len(shstr)
		shstr = append(append(shstr, s.name...), 0)
	}
	names[len(secs)] = len(shstr)
	shstr = append(shstr, ".shstrtab\x00"...)
	secs = append(secs, testSection{name: ".shstrtab", typ: 3, data: shstr})
	const ehsize, shentsize = 64, 64
	out := make([]byte, ehsize)
	offs := make([]int, len(secs))
	for i, s := range secs {
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		offs[i] = len(out)
		out = append(out, s.data...)
	}
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	shOff := len(out)
	out = append(out, make([]byte, (len(secs)+1)*shentsize)...)
	copy(out, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(out[16:], 2)    // ET_EXEC
	le.PutUint16(out[18:], 190)  // EM_CUDA
	le.PutUint32(out[20:], 0x7c) // CUDA's e_version
	le.PutUint64(out[40:], uint64(shOff))
	le.PutUint16(out[52:], ehsize)
	le.PutUint16(out[58:], shentsize)
	le.PutUint16(out[60:], uint16(len(secs)+1))
	le.PutUint16(out[62:], uint16(len(secs))) // .shstrtab's index
	for i, s := range secs {
		b := out[shOff+(i+1)*shentsize:]
		size := len(s.data)
		if s.typ == 8 { // SHT_NOBITS
			size = s.size
		}
		le.PutUint32(b[0:], uint32(names[i]))
		le.PutUint32(b[4:], s.typ)
		le.PutUint64(b[24:], uint64(offs[i]))
		le.PutUint64(b[32:], uint64(size))
		le.PutUint32(b[40:], uint32(s.link))
		le.PutUint64(b[48:], 1)
		le.PutUint64(b[56:], uint64(s.ent))
	}
	return out
}

// resourceCubin is a cubin with kernels "other" (symbol 1) and "k" (symbol
// 2): .nv.info records (attribute, symbol, value) and, where shared > 0,
// .nv.shared.k of that size.
func resourceCubin(recs [][3]int, shared int, syms ...string) []byte {
	strtab := []byte{0}
	symtab := make([]byte, 24) // the null symbol
	for _, s := range syms {
		sym := make([]byte, 24)
		binary.LittleEndian.PutUint32(sym, uint32(len(strtab)))
		sym[4] = 0x12 // STB_GLOBAL, STT_FUNC
		symtab = append(symtab, sym...)
		strtab = append(append(strtab, s...), 0)
	}
	var info []byte
	for _, r := range recs {
		rec := make([]byte, 12)
		rec[0], rec[1] = eifmtSVal, byte(r[0])
		binary.LittleEndian.PutUint16(rec[2:], 8)
		binary.LittleEndian.PutUint32(rec[4:], uint32(r[1]))
		binary.LittleEndian.PutUint32(rec[8:], uint32(r[2]))
		info = append(info, rec...)
	}
	secs := []testSection{{name: ".strtab", typ: 3, data: strtab}, {name: ".symtab", typ: 2, data: symtab, link: 1, ent: 24},
		{name: ".nv.info", typ: 0x70000000, data: info}}
	if shared > 0 {
		secs = append(secs, testSection{name: ".nv.shared.k", typ: 8, size: shared})
	}
	return testCubin(secs...)
}

// TestCubinKernelResources reads a hand-made cubin's register count, frame
// and static shared memory for the kernel named, not another's, and
// refuses cubins that lack them.
func TestCubinKernelResources(t *testing.T) {
	recs := [][3]int{{eiattrRegCount, 1, 40}, {eiattrRegCount, 2, 72}, {eiattrFrameSize, 2, 16}, {eiattrFrameSize, 1, 8}}
	r, err := CubinKernelResources(resourceCubin(recs, 1536, "other", "k"), "k")
	if want := (KernelResources{Registers: 72, FrameBytes: 16, SharedSection: 1536}); err != nil || r != want {
		t.Fatalf("got %+v, err %v; want %+v", r, err, want)
	}
	r, err = CubinKernelResources(resourceCubin(recs, 0, "other", "k"), "other")
	if want := (KernelResources{Registers: 40, FrameBytes: 8}); err != nil || r != want {
		t.Fatalf("other: got %+v, err %v; want %+v", r, err, want)
	}
	for _, c := range []struct {
		name string
		data []byte
		kern string
	}{
		{"no such symbol", resourceCubin(recs, 0, "other", "k"), "absent"},
		{"no register count", resourceCubin([][3]int{{eiattrRegCount, 1, 40}}, 0, "other", "k"), "k"},
		{"no .nv.info", testCubin(testSection{name: ".strtab", typ: 3, data: []byte("\x00k\x00")}), "k"},
		{"not ELF", []byte("not a cubin at all, really"), "k"},
		{"record past the section", testCubin(testSection{name: ".strtab", typ: 3, data: []byte("\x00k\x00")},
			testSection{name: ".symtab", typ: 2, data: append(make([]byte, 24), 1, 0, 0, 0, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), link: 1, ent: 24},
			testSection{name: ".nv.info", typ: 0x70000000, data: []byte{eifmtSVal, eiattrRegCount, 16, 0, 1, 0}}), "k"},
	} {
		if _, err := CubinKernelResources(c.data, c.kern); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// FuzzCubinKernelResources: no input makes the resource reader panic, and
// what it accepts is never negative.
func FuzzCubinKernelResources(f *testing.F) {
	f.Add(resourceCubin([][3]int{{eiattrRegCount, 2, 72}}, 64, "other", "k"), "k")
	f.Add(minimalCubin(nil), "k")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		r, err := CubinKernelResources(data, name)
		if err == nil && (r.Registers < 0 || r.FrameBytes < 0 || r.SharedSection < 0) {
			t.Fatalf("%+v", r)
		}
	})
}
