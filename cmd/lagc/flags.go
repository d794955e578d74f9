package main

import (
	"flag"
	"fmt"
	"strconv"
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

// parseLayers parses --layers, a list of layer numbers and ranges such as
// "0-3,7", for a model of n layers.
func parseLayers(s string, n int) (func(int) bool, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: --layers %q: "+format, append([]any{errUsage, s}, a...)...)
	}
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		switch {
		case err != nil:
			return nil, bad("expected layer numbers and ranges such as 0-3,7")
		case a < 0 || b < a:
			return nil, bad("%q is not a range of layers", part)
		case b >= n:
			return nil, bad("the model has layers 0-%d", n-1)
		}
		for l := a; l <= b; l++ {
			set[l] = true
		}
	}
	return func(l int) bool { return set[l] }, nil
}

// weightCacheFlag is --weight-cache on|off|all: whether the GPU executor
// keeps converted weights in the on-disk weight cache (all: quantised ones
// too).
type weightCacheFlag struct{ off, all bool }

func (f *weightCacheFlag) String() string {
	switch {
	case f == nil:
		return "on"
	case f.off:
		return "off"
	case f.all:
		return "all"
	}
	return "on"
}

func (f *weightCacheFlag) Set(v string) error {
	switch strings.ToLower(v) {
	case "on", "true", "1":
		f.off, f.all = false, false
	case "off", "false", "0":
		f.off, f.all = true, false
	case "all":
		f.off, f.all = false, true
	default:
		return fmt.Errorf("expected on, off or all, got %q", v)
	}
	return nil
}

// addWeightCacheFlag defines --weight-cache on fs, stored in f.
func addWeightCacheFlag(fs *flag.FlagSet, f *weightCacheFlag) {
	fs.Var(f, "weight-cache", "GPU: on keeps weights converted through float32 in the on-disk weight cache ($LAGC_CACHE_DIR/weights; see lagc cache); all also keeps quantised weights' repacked blocks; off converts everything at every load")
}

// flagRule is one numeric flag's constraint: ok false makes a usage error
// naming the flag, its value and what it wants.
type flagRule struct {
	name string
	val  any
	ok   bool
	want string
}

// checkFlagRules returns a usage error for the first rule that fails.
func checkFlagRules(rules ...flagRule) error {
	for _, r := range rules {
		if !r.ok {
			return fmt.Errorf("%w: %s %v: %s", errUsage, r.name, r.val, r.want)
		}
	}
	return nil
}

// positive and notNegative are flagRules for ints. A float rule's ok is a
// comparison such as x >= 0, which NaN fails.
func positive(name string, v int) flagRule { return flagRule{name, v, v > 0, "must be positive"} }
func notNegative(name string, v int) flagRule {
	return flagRule{name, v, v >= 0, "must not be negative"}
}
