package wcache

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/zeebo/xxh3"
)

// On-disk entry layout, integers little-endian:
//
//	 0 magic      [8]byte "LAGCWGT1"
//	 8 metaLen    uint32  (JSON metadata, at most maxMeta bytes)
//	12 reserved   uint32  (0)
//	16 payloadOff uint64  (64+metaLen rounded up to pageSize)
//	24 payloadLen uint64
//	32 payloadSum [16]byte XXH3-128 of the payload
//	48 headSum    [16]byte XXH3-128 of bytes 0..47 and the metadata
//	64 metadata, zero padding, payload; the file ends with the payload.
//
// The payload starts on a page boundary so that a mapped entry hands the
// device copy page-aligned memory.
var magic = [8]byte{'L', 'A', 'G', 'C', 'W', 'G', 'T', '1'}

const (
	fixedHead = 64
	maxMeta   = 64 << 10
	pageSize  = 4096
)

// ErrCorrupt marks an entry that failed verification. Get removes such an
// entry; the caller rebuilds it.
var ErrCorrupt = errors.New("damaged weight cache entry")

// Meta describes an entry: what it was made for, for lagc cache list.
type Meta struct {
	Key     string    `json:"key"`
	Name    string    `json:"name"` // the plan weight it was made for
	DType   string    `json:"dtype"`
	Shape   []int     `json:"shape"`
	Layout  string    `json:"layout,omitempty"`
	Source  string    `json:"source,omitempty"` // the checkpoint it came from
	Created time.Time `json:"created"`
}

// header is an entry's decoded fixed part and metadata.
type header struct {
	meta       Meta
	payloadOff int64
	payloadLen int64
	payloadSum xxh3.Uint128
}

func payloadOffset(metaLen int) int64 {
	return (int64(fixedHead+metaLen) + pageSize - 1) / pageSize * pageSize
}

// writeEntry writes an entry of payload with meta to w.
func writeEntry(w io.Writer, meta Meta, payload []byte) error {
	mj, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if len(mj) > maxMeta {
		return fmt.Errorf("entry metadata of %d bytes, more than %d", len(mj), maxMeta)
	}
	off := payloadOffset(len(mj))
	head := make([]byte, off)
	copy(head, magic[:])
	binary.LittleEndian.PutUint32(head[8:], uint32(len(mj)))
	binary.LittleEndian.PutUint64(head[16:], uint64(off))
	binary.LittleEndian.PutUint64(head[24:], uint64(len(payload)))
	putSum(head[32:48], xxh3.Hash128(payload))
	copy(head[fixedHead:], mj)
	putSum(head[48:64], headSum(head[:48], mj))
	if _, err := w.Write(head); err != nil {
		return err
	}
	_, err = w.Write(payload)
	return err
}

func headSum(fixed, meta []byte) xxh3.Uint128 {
	h := xxh3.New128()
	h.Write(fixed)
	h.Write(meta)
	return h.Sum128()
}

func putSum(b []byte, s xxh3.Uint128) {
	binary.LittleEndian.PutUint64(b, s.Lo)
	binary.LittleEndian.PutUint64(b[8:], s.Hi)
}

func getSum(b []byte) xxh3.Uint128 {
	return xxh3.Uint128{Lo: binary.LittleEndian.Uint64(b), Hi: binary.LittleEndian.Uint64(b[8:])}
}

// decodeHeader checks and decodes the head of an entry file of size bytes
// (head: its first bytes, at least fixedHead+maxMeta of them where the file
// has that many). The payload is not checked here (verifyPayload).
func decodeHeader(head []byte, size int64) (header, error) {
	bad := func(format string, a ...any) (header, error) {
		return header{}, fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, a...)...)
	}
	if len(head) < fixedHead || !bytes.Equal(head[:8], magic[:]) {
		return bad("not a lagc weight cache entry")
	}
	metaLen := binary.LittleEndian.Uint32(head[8:])
	if metaLen > maxMeta || int64(len(head)) < fixedHead+int64(metaLen) {
		return bad("metadata length %d past the header", metaLen)
	}
	if binary.LittleEndian.Uint32(head[12:]) != 0 {
		return bad("reserved field set")
	}
	mj := head[fixedHead : fixedHead+int(metaLen)]
	if headSum(head[:48], mj) != getSum(head[48:64]) {
		return bad("header checksum mismatch")
	}
	h := header{payloadSum: getSum(head[32:48])}
	off, n := binary.LittleEndian.Uint64(head[16:]), binary.LittleEndian.Uint64(head[24:])
	if int64(off) != payloadOffset(int(metaLen)) || n > uint64(size) || int64(off)+int64(n) != size {
		return bad("payload of %d bytes at %d in a file of %d bytes", n, off, size)
	}
	h.payloadOff, h.payloadLen = int64(off), int64(n)
	if err := json.Unmarshal(mj, &h.meta); err != nil {
		return bad("metadata: %v", err)
	}
	return h, nil
}

// verifyPayload checks the payload of a decoded entry against its sum.
func verifyPayload(h header, payload []byte) error {
	if int64(len(payload)) != h.payloadLen {
		return fmt.Errorf("%w: %d payload bytes, the header says %d", ErrCorrupt, len(payload), h.payloadLen)
	}
	if xxh3.Hash128(payload) != h.payloadSum {
		return fmt.Errorf("%w: payload checksum mismatch", ErrCorrupt)
	}
	return nil
}
