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
	shstr := []byte("\x00.shstrtab\x00.nv.info.k\x00")
	const ehsize, shentsize = 64, 64
	infoOff := ehsize
	strOff := infoOff + len(info)
	shOff := (strOff + len(shstr) + 7) &^ 7
	out := make([]byte, shOff+3*shentsize)
	copy(out, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(out[16:], 2)    // ET_EXEC
	le.PutUint16(out[18:], 190)  // EM_CUDA
	le.PutUint32(out[20:], 0x7c) // CUDA's e_version
	le.PutUint64(out[40:], uint64(shOff))
	le.PutUint16(out[52:], ehsize)
	le.PutUint16(out[58:], shentsize)
	le.PutUint16(out[60:], 3) // sections
	le.PutUint16(out[62:], 1) // .shstrtab's index
	copy(out[infoOff:], info)
	copy(out[strOff:], shstr)
	sh := func(i int, name, typ uint32, off, size int) {
		b := out[shOff+i*shentsize:]
		le.PutUint32(b[0:], name)
		le.PutUint32(b[4:], typ)
		le.PutUint64(b[24:], uint64(off))
		le.PutUint64(b[32:], uint64(size))
		le.PutUint64(b[48:], 1)
	}
	sh(1, 1, 3, strOff, len(shstr))           // .shstrtab, SHT_STRTAB
	sh(2, 11, 0x70000000, infoOff, len(info)) // .nv.info.k, SHT_LOPROC
	return out
}
