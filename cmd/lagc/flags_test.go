package main

import (
	"lagc/internal/stopseq"
	"slices"
	"strings"
	"testing"
)

func TestParseLayers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int // accepted layers of 0..7
		err  string
	}{
		{"0-3", []int{0, 1, 2, 3}, ""},
		{"1, 5-6,1", []int{1, 5, 6}, ""},
		{"7", []int{7}, ""},
		{"8", nil, "the model has layers 0-7"},
		{"2-1", nil, "not a range"},
		{"-1", nil, "expected layer numbers"},
		{"", nil, "expected layer numbers"},
		{"1-", nil, "expected layer numbers"},
	} {
		sel, err := parseLayers(c.in, 8)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		var got []int
		for l := range 8 {
			if sel(l) {
				got = append(got, l)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q selects %v, want %v", c.in, got, c.want)
		}
	}
}

// FuzzParseLayers: any --layers value is accepted as layers within the
// model or refused with a usage error; never a panic.
func FuzzParseLayers(f *testing.F) {
	for _, s := range []string{"0-3", "1,5-6", "", "-", "9999999999999999999", "3-1", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := parseLayers(s, 48)
		if err != nil {
			return
		}
		if sel(-1) || sel(48) {
			t.Fatalf("%q selects a layer outside 0-47", s)
		}
	})
}

// FuzzParseIDs: --prompt-ids either parses to as many ids as it has
// comma-separated fields or is refused.
func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{"1,2,3", "1,,2", " 7 ", "", "-1", "99999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parseIDs(s)
		if err == nil && len(ids) != strings.Count(s, ",")+1 {
			t.Fatalf("%q parsed to %d ids", s, len(ids))
		}
	})
}

// FuzzStopFilter: what the filter releases is always a prefix of the text
// it was given; when it reports a stop, a stop string follows that prefix,
// and without one everything comes out.
func FuzzStopFilter(f *testing.F) {
	f.Add("abEN", "Dxyz", "END")
	f.Add("café", "!", "é!")
	f.Fuzz(func(t *testing.T, a, b, stop string) {
		if stop == "" {
			return
		}
		fl := stopseq.New([]string{stop})
		var out strings.Builder
		stopped := false
		for _, ch := range []string{a, b} {
			s, st := fl.Add(ch)
			out.WriteString(s)
			if st {
				stopped = true
				break
			}
		}
		in := a + b
		if !stopped {
			out.WriteString(fl.Flush())
			if out.String() != in || strings.Contains(in, stop) {
				t.Fatalf("no stop: released %q of %q (stop %q)", out.String(), in, stop)
			}
			return
		}
		if !strings.HasPrefix(in, out.String()+stop) || strings.Contains(out.String(), stop) {
			t.Fatalf("stopped after %q of %q (stop %q)", out.String(), in, stop)
		}
	})
}
