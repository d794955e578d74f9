package wcache

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzEntry: decoding any file as an entry never panics; what decodes
// either verifies or reports ErrCorrupt, and a valid entry round-trips.
func FuzzEntry(f *testing.F) {
	var b bytes.Buffer
	if err := writeEntry(&b, Meta{Key: "k", Name: "blk.0.attn_q.weight", DType: "q8_0", Shape: []int{2, 32}}, payload(68, 1)); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:100])
	f.Add([]byte("LAGCWGT1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHeader(data[:min(len(data), fixedHead+maxMeta)], int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if h.payloadOff < fixedHead || h.payloadOff+h.payloadLen != int64(len(data)) {
			t.Fatalf("payload [%d, +%d) in %d bytes", h.payloadOff, h.payloadLen, len(data))
		}
		if err := verifyPayload(h, data[h.payloadOff:]); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		var again bytes.Buffer
		if err := writeEntry(&again, h.meta, data[h.payloadOff:]); err != nil {
			t.Fatal(err)
		}
		h2, err := decodeHeader(again.Bytes()[:min(again.Len(), fixedHead+maxMeta)], int64(again.Len()))
		if err != nil || h2.payloadSum != h.payloadSum {
			t.Fatalf("a valid entry does not round-trip: %v", err)
		}
	})
}
