package lower

import (
	"fmt"
	"strings"
	"testing"
)

// TestConversions: a plan lists the block-quantised weights it uploads in
// a float type, by source type with their stored and device bytes: all of
// a type without GPU kernels (q3_k), none of one with them (q4_k: the
// embedding table too, since qembedding), and the note says so in a line.
func TestConversions(t *testing.T) {
	for _, c := range []struct {
		recipe string
		want   []string // "source tensors" of each conversion, most bytes first
	}{
		{"q3_k", []string{"q3_k 10"}},
		{"q4_k", nil},
		{"", nil},
	} {
		p, err := quantPlan(t, "laguna-s-2.1", 2, c.recipe, Options{DType: 0, MaxContext: 256})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, cv := range p.Conversions() {
			got = append(got, fmt.Sprintf("%s %d", cv.Source, cv.Tensors))
			if cv.DType != "bf16" || cv.Bytes <= cv.Stored || cv.Stored <= 0 {
				t.Errorf("%s: %+v: want bf16 and more device bytes than stored", c.recipe, cv)
			}
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: conversions %v, want %v", c.recipe, got, c.want)
		}
		note := p.ConversionNote()
		first := "" // the first conversion as the note says it: "10 q3_k tensors"
		if len(c.want) > 0 {
			f := strings.Fields(c.want[0])
			first = f[1] + " " + f[0] + " tensors"
		}
		if (note != "") != (first != "") || !strings.Contains(note, first) {
			t.Errorf("%s: note %q", c.recipe, note)
		}
	}
}
