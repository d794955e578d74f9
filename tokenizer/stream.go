package tokenizer

import "unicode/utf8"

// StreamDecoder turns ids into text as they are generated. A character whose
// bytes are spread over several tokens (CJK, emoji with small vocabularies)
// is held back until it is complete, so every string Add returns is valid
// UTF-8. Bytes that can never form a character are emitted as U+FFFD.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
}

// NewStreamDecoder starts a stream. With skipSpecial, special tokens (such as
// an end-of-sequence marker) produce no text.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add decodes one more id and returns the text that is now complete.
func (d *StreamDecoder) Add(id int32) string {
	d.pending = d.t.appendToken(d.pending, id, d.skipSpecial)
	return d.drain(false)
}

// Flush returns whatever is still held back (an unfinished character comes
// out as U+FFFD) and resets the stream.
func (d *StreamDecoder) Flush() string {
	return d.drain(true)
}

func (d *StreamDecoder) drain(final bool) string {
	var out []byte
	i := 0
	for i < len(d.pending) {
		r, n := utf8.DecodeRune(d.pending[i:])
		if r == utf8.RuneError && n <= 1 {
			if !final && !utf8.FullRune(d.pending[i:]) {
				break // the start of a character whose other bytes are yet to come
			}
			out = utf8.AppendRune(out, utf8.RuneError)
			i++
			continue
		}
		out = append(out, d.pending[i:i+n]...)
		i += n
	}
	d.pending = append(d.pending[:0], d.pending[i:]...)
	return string(out)
}
