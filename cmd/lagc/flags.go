package main

import (
	"flag"
	"fmt"
	"strings"

	"lagc/passes"
)

// stringList is a repeatable string flag (--stop A --stop B).
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkPassNames refuses unknown names in --passes and --disable-pass as
// usage errors, before anything is loaded.
func checkPassNames(pipeline, disable string) error {
	for _, l := range []struct{ flag, list string }{{"--passes", pipeline}, {"--disable-pass", disable}} {
		for _, name := range splitList(l.list) {
			if _, ok := passes.Lookup(name); !ok {
				return fmt.Errorf("%w: %s: unknown pass %q (known: %s)", errUsage, l.flag, name, strings.Join(passes.Names(), ", "))
			}
		}
	}
	return nil
}
