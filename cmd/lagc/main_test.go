package main

import (
	"flag"
	"io"
	"testing"
)

// TestHelpArgumentNames: `lagc help COMMAND` shows each flag's argument as
// its type (bool flags take none). A back-quoted word in a usage string
// becomes the argument name instead (flag.UnquoteUsage): `-raw
// tokenizer.encode(...)` for a bool flag, `-dump-after all`.
func TestHelpArgumentNames(t *testing.T) {
	for name, c := range commands {
		fs := newFlagSet(c, io.Discard)
		c.setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			arg, _ := flag.UnquoteUsage(f)
			switch arg {
			case "", "string", "int", "uint", "float", "duration", "value":
			default:
				t.Errorf("lagc help %s: -%s shows argument %q: back quotes in its usage", name, f.Name, arg)
			}
		})
	}
}
