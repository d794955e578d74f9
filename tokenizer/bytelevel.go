package tokenizer

import "unicode/utf8"

// GPT-2's byte-level alphabet: every byte maps to one printable rune so that
// BPE vocabularies can be stored as text. Printable Latin-1 bytes map to
// themselves; the rest (controls, space, 0x7f-0xa0, 0xad) are shifted to
// U+0100 onwards in byte order.
var (
	byteToRune [256]rune
	runeToByte = make(map[rune]byte, 256)
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelString maps raw bytes to their byte-level alphabet form.
func byteLevelString(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}

// byteLevelDecode inverts byteLevelString for a token's text. Like HF's
// ByteLevel decoder, a token containing any rune outside the alphabet (an
// added token such as "〈|EOS|〉") is taken as its own UTF-8 bytes.
func byteLevelDecode(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}
