package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/google/pprof/profile"
)

func init() {
	register(&command{
		name:    "profile",
		summary: "print where GPU time goes in a --profile file (lagc bench or run): per kernel, per layer",
		usage:   "profile FILE.pprof [--class prefill|decode] [--layer N] [--top N]",
		setup: func(fs *flag.FlagSet) func([]string) error {
			var o profileOpts
			fs.StringVar(&o.class, "class", "", "only this class of steps: decode or prefill (default: each in the file)")
			var layer string
			fs.StringVar(&layer, "layer", "", "one layer's launches by node: its index, or outside (the embedding, the LM head); default: every layer's, by op and kernel")
			fs.IntVar(&o.top, "top", 25, "rows a class (0: all)")
			return func(args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one profile file, got %d arguments", errUsage, len(args))
				}
				o.layer = allLayers
				switch {
				case layer == "outside":
					o.layer = -1
				case layer != "":
					n, err := strconv.Atoi(layer)
					if err != nil || n < 0 {
						return fmt.Errorf("%w: --layer %q: want a layer index or outside", errUsage, layer)
					}
					o.layer = n
				}
				if o.top < 0 {
					return fmt.Errorf("%w: --top %d: want 0 or more rows", errUsage, o.top)
				}
				if o.class != "" && o.class != "decode" && o.class != "prefill" {
					return fmt.Errorf("%w: --class %q: want decode or prefill", errUsage, o.class)
				}
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				p, err := profile.Parse(f)
				if err != nil {
					return fmt.Errorf("%s: not a pprof profile: %w", args[0], err)
				}
				return printProfile(profileStdout, p, o)
			}
		},
	})
}

// profileStdout is where profile prints (tests replace it).
var profileStdout io.Writer = os.Stdout

type profileOpts struct {
	class      string
	layer, top int // layer: an index, -1 outside the layers, allLayers
}

// allLayers is profileOpts.layer for every layer's launches by kernel.
const allLayers = -2

// profRow is one sample of a lagc profile (gpu.BuildProfile's labels).
type profRow struct {
	class, node, op, launcher string
	layer                     int
	launches, ns              int64
}

var stepsComment = regexp.MustCompile(`^(\w+) steps: (\d+)$`)

// printProfile prints, for each class, its GPU time a step and either its
// kernels summed over the layers by (op, launcher), with the layers they
// ran in, or one layer's launches by (node, launcher); shares are of the
// class's total. Times are per step: the class total over its steps.
func printProfile(w io.Writer, p *profile.Profile, o profileOpts) error {
	steps := map[string]int{}
	for _, c := range p.Comments {
		if m := stepsComment.FindStringSubmatch(c); m != nil {
			n, _ := strconv.Atoi(m[2])
			steps[m[1]] = n
		}
	}
	ti, ci := -1, -1
	for i, st := range p.SampleType {
		switch st.Type {
		case "gpu_time":
			ti = i
		case "launches":
			ci = i
		}
	}
	if ti < 0 || ci < 0 {
		return fmt.Errorf("profile: no gpu_time and launches samples: not written by lagc --profile")
	}
	var rows []profRow
	for _, s := range p.Sample {
		r := profRow{class: label(s, "class"), node: label(s, "node"), op: label(s, "op"), launcher: label(s, "launcher"),
			layer: -1, launches: s.Value[ci], ns: s.Value[ti]}
		if l := s.NumLabel["layer"]; len(l) == 1 {
			r.layer = int(l[0])
		}
		if r.class == "" || r.launcher == "" {
			return fmt.Errorf("profile: a sample without class or launcher labels: not written by lagc --profile")
		}
		rows = append(rows, r)
	}
	classes := map[string]bool{}
	for _, r := range rows {
		classes[r.class] = true
	}
	var names []string
	for c := range classes {
		if o.class == "" || c == o.class {
			names = append(names, c)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("profile: no %s steps in the file", o.class)
	}
	sort.Strings(names)
	for i, c := range names {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printProfileClass(w, c, steps[c], rows, o)
	}
	return nil
}

func label(s *profile.Sample, k string) string {
	if v := s.Label[k]; len(v) == 1 {
		return v[0]
	}
	return ""
}

func printProfileClass(w io.Writer, class string, steps int, rows []profRow, o profileOpts) {
	n := steps
	if n <= 0 {
		n = 1 // an older file without the count: totals
	}
	// Over all layers a kernel's launches inside the layers and outside
	// them (the head, the embedding) are separate rows: the same kernel
	// may run both (the routers' and the head's cuBLASLt GEMM), and one
	// row would spread the head's time over the layers' "us a layer".
	type agg struct {
		what         []string
		launches, ns int64
		layers       map[int]bool
		outside      bool
	}
	byKey := map[string]*agg{}
	var total int64
	layerNs := map[int]int64{}
	for _, r := range rows {
		if r.class != class {
			continue
		}
		total += r.ns
		layerNs[r.layer] += r.ns
		var what []string
		switch {
		case o.layer == allLayers:
			what = []string{r.op, r.launcher, strconv.FormatBool(r.layer < 0)}
		case r.layer == o.layer:
			what = []string{r.node, r.op, r.launcher}
		default:
			continue
		}
		k := strings.Join(what, "\x00")
		a := byKey[k]
		if a == nil {
			a = &agg{what: what, layers: map[int]bool{}, outside: r.layer < 0}
			byKey[k] = a
		}
		a.launches += r.launches
		a.ns += r.ns
		a.layers[r.layer] = true
	}
	inLayers := 0
	for l := range layerNs {
		if l >= 0 {
			inLayers++
		}
	}
	stepsText := fmt.Sprintf("%d steps", steps)
	switch {
	case steps == 1:
		stepsText = "1 step"
	case steps <= 0:
		stepsText = "steps not recorded: totals"
	}
	fmt.Fprintf(w, "%s: %s, %.1f us of GPU time a step over %d layers", class, stepsText, us(total, n), inLayers)
	if l := layerNs[-1]; l > 0 {
		fmt.Fprintf(w, " and %.1f outside them", us(l, n))
	}
	fmt.Fprintln(w)
	list := make([]*agg, 0, len(byKey))
	for _, a := range byKey {
		list = append(list, a)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].ns != list[j].ns {
			return list[i].ns > list[j].ns
		}
		return strings.Join(list[i].what, " ") < strings.Join(list[j].what, " ")
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if o.layer == allLayers {
		fmt.Fprintln(tw, "  op\tkernel\tlayers\tlaunches a step\tus a step\tus a layer\tshare\t")
	} else {
		fmt.Fprintf(tw, "  %s, %.1f us a step\n", layerTitle(o.layer), us(layerNs[o.layer], n))
		fmt.Fprintln(tw, "  node\top\tkernel\tlaunches a step\tus a step\tshare\t")
	}
	for i, a := range list {
		if o.top > 0 && i == o.top {
			fmt.Fprintf(tw, "  (%d more: --top 0 lists all)\n", len(list)-o.top)
			break
		}
		share := 0.0
		if total > 0 {
			share = 100 * float64(a.ns) / float64(total)
		}
		launches := float64(a.launches) / float64(n)
		switch {
		case o.layer == allLayers && a.outside:
			fmt.Fprintf(tw, "  %s\t%s\toutside\t%.1f\t%.1f\t-\t%.1f%%\t\n", a.what[0], a.what[1], launches, us(a.ns, n), share)
		case o.layer == allLayers:
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f%%\t\n", a.what[0], a.what[1], len(a.layers), launches, us(a.ns, n),
				us(a.ns, n)/float64(len(a.layers)), share)
		default:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.1f\t%.1f\t%.1f%%\t\n", a.what[0], a.what[1], a.what[2], launches, us(a.ns, n), share)
		}
	}
	tw.Flush()
}

func layerTitle(l int) string {
	if l < 0 {
		return "outside the layers"
	}
	return fmt.Sprintf("layer %d", l)
}

// us is ns nanoseconds over n steps in microseconds.
func us(ns int64, n int) float64 { return float64(ns) / float64(n) / 1e3 }
