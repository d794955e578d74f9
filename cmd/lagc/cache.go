package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"lagc/cuda"
	"lagc/internal/cachedir"
	"lagc/lower"
	"lagc/wcache"
)

func init() {
	register(&command{
		name:    "cache",
		summary: "list, verify or remove the on-disk caches of compiled kernels and converted weights",
		usage:   "cache list [--json] | cache verify | cache remove (--all | --weights | --kernels) [--older-than D]",
		setup: func(fs *flag.FlagSet) func([]string) error {
			var o cacheOpts
			fs.BoolVar(&o.json, "json", false, "list: print one JSON object")
			fs.BoolVar(&o.all, "all", false, "remove: every kernel and weight entry")
			fs.BoolVar(&o.weights, "weights", false, "remove: the weight entries (and the memo of source hashes)")
			fs.BoolVar(&o.kernels, "kernels", false, "remove: the compiled kernels")
			fs.StringVar(&o.olderThan, "older-than", "", "remove: only entries last used longer ago than this (e.g. 36h, 7d)")
			return func(args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one of list, verify or remove, got %d arguments", errUsage, len(args))
				}
				return runCache(args[0], o, cacheStdout)
			}
		},
	})
}

// cacheStdout is where cache prints (tests replace it).
var cacheStdout io.Writer = os.Stdout

type cacheOpts struct {
	json, all, weights, kernels bool
	olderThan                   string
}

// cacheEntry is one entry of either cache, as list shows it.
type cacheEntry struct {
	Kind  string    `json:"kind"` // kernel or weight
	Path  string    `json:"path"`
	Size  int64     `json:"size"`
	Used  time.Time `json:"used"` // last written or read
	Key   string    `json:"key"`
	What  string    `json:"what"`            // kernel name, or weight name, type, shape, layout
	Error string    `json:"error,omitempty"` // why the entry is damaged
}

// The names entries have; anything else in the directories is left alone
// (with LAGC_CACHE_DIR set, the kernel directory is the cache root).
var (
	kernelName = regexp.MustCompile(`^[0-9a-f]{64}` + regexp.QuoteMeta(cuda.EntrySuffix) + `$`)
	weightName = regexp.MustCompile(`^[0-9a-f]{64}` + regexp.QuoteMeta(wcache.EntrySuffix) + `$`)
)

// cacheDirs are the kernel and weight cache directories.
func cacheDirs() (kernels, weights string, err error) {
	if kernels, err = cachedir.Kernels(); err != nil {
		return "", "", err
	}
	weights, err = cachedir.Weights()
	return kernels, weights, err
}

func runCache(sub string, o cacheOpts, w io.Writer) error {
	removing := o.all || o.weights || o.kernels || o.olderThan != ""
	if sub != "remove" && removing {
		return fmt.Errorf("%w: --all, --weights, --kernels and --older-than go with cache remove", errUsage)
	}
	if sub != "list" && o.json {
		return fmt.Errorf("%w: --json goes with cache list", errUsage)
	}
	kdir, wdir, err := cacheDirs()
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		return cacheList(w, kdir, wdir, o.json)
	case "verify":
		return cacheVerify(w, kdir, wdir)
	case "remove":
		return cacheRemove(w, kdir, wdir, o)
	}
	return fmt.Errorf("%w: unknown cache command %q: want list, verify or remove", errUsage, sub)
}

// kernelEntries lists the kernel cache, checking each entry (cubins are
// small).
func kernelEntries(dir string) ([]cacheEntry, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []cacheEntry
	for _, de := range ents {
		if !kernelName.MatchString(de.Name()) {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		e := cacheEntry{Kind: "kernel", Path: filepath.Join(dir, de.Name()), Size: info.Size(), Used: info.ModTime(),
			Key: strings.TrimSuffix(de.Name(), cuda.EntrySuffix)}
		if ce, err := cuda.ReadCacheEntry(e.Path); err != nil {
			e.Error = err.Error()
		} else {
			e.What = ce.Kernel
		}
		out = append(out, e)
	}
	return out, nil
}

// weightEntries lists the weight cache from the entries' headers.
func weightEntries(dir string) ([]cacheEntry, error) {
	list, err := wcache.Open(dir).List()
	if err != nil {
		return nil, err
	}
	var out []cacheEntry
	for _, in := range list {
		if !weightName.MatchString(filepath.Base(in.Path)) {
			continue
		}
		e := cacheEntry{Kind: "weight", Path: in.Path, Size: in.Size, Used: in.Used,
			Key: strings.TrimSuffix(filepath.Base(in.Path), wcache.EntrySuffix)}
		if in.Err != nil {
			e.Error = in.Err.Error()
		} else {
			m := in.Meta
			e.What = fmt.Sprintf("%s %s %v", m.Name, m.DType, m.Shape)
			if m.Layout != "" {
				e.What += " " + m.Layout
			}
			if m.Source != "" {
				e.What += " from " + m.Source
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// memoFiles are the weight cache's memo of source hashes.
func memoFiles(wdir string) []string {
	m, _ := filepath.Glob(filepath.Join(wcache.SourcesDir(wdir), "*.json"))
	return m
}

func allEntries(kdir, wdir string) ([]cacheEntry, error) {
	k, err := kernelEntries(kdir)
	if err != nil {
		return nil, fmt.Errorf("kernel cache %s: %w", kdir, err)
	}
	ws, err := weightEntries(wdir)
	if err != nil {
		return nil, err
	}
	return append(k, ws...), nil
}

func cacheList(w io.Writer, kdir, wdir string, asJSON bool) error {
	ents, err := allEntries(kdir, wdir)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if ents == nil {
			ents = []cacheEntry{}
		}
		return enc.Encode(struct {
			KernelDir string       `json:"kernel_dir"`
			WeightDir string       `json:"weight_dir"`
			Entries   []cacheEntry `json:"entries"`
			Memos     int          `json:"source_hash_memos"`
		}{kdir, wdir, ents, len(memoFiles(wdir))})
	}
	fmt.Fprintf(w, "kernels: %s\nweights: %s\n", kdir, wdir)
	now := time.Now()
	if len(ents) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tSIZE\tUSED\tKEY\tWHAT")
		for _, e := range ents {
			what := e.What
			if e.Error != "" {
				what = "DAMAGED: " + e.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s ago\t%.16s\t%s\n", e.Kind, lower.FormatBytes(e.Size), age(now.Sub(e.Used)), e.Key, what)
		}
		tw.Flush()
	}
	var n [2]int
	var b [2]int64
	for _, e := range ents {
		k := 0
		if e.Kind == "weight" {
			k = 1
		}
		n[k]++
		b[k] += e.Size
	}
	fmt.Fprintf(w, "total: %d kernels (%s), %d weights (%s); %d source hash memos\n",
		n[0], lower.FormatBytes(b[0]), n[1], lower.FormatBytes(b[1]), len(memoFiles(wdir)))
	return nil
}

// age is a duration in its largest whole unit.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func cacheVerify(w io.Writer, kdir, wdir string) error {
	ents, err := allEntries(kdir, wdir)
	if err != nil {
		return err
	}
	var damaged []string
	var bytes int64
	for _, e := range ents {
		bytes += e.Size
		if e.Error == "" && e.Kind == "weight" {
			if err := wcache.Verify(e.Path); err != nil {
				e.Error = err.Error()
			}
		}
		if e.Error != "" {
			damaged = append(damaged, fmt.Sprintf("%s %s: %s", e.Kind, e.Path, e.Error))
		}
	}
	fmt.Fprintf(w, "verify: %d entries checked (%s)\n", len(ents), lower.FormatBytes(bytes))
	if len(damaged) > 0 {
		for _, d := range damaged {
			fmt.Fprintln(w, d)
		}
		return fmt.Errorf("%d damaged entries (they are rebuilt when next needed; lagc cache remove deletes them)", len(damaged))
	}
	fmt.Fprintln(w, "verify: every entry is sound")
	return nil
}

// parseAge parses --older-than: a Go duration (36h, 90m) or days (7d).
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err == nil && n >= 0 && n < 1e5 {
			return time.Duration(n * 24 * float64(time.Hour)), nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%w: --older-than %q: expected a duration such as 36h or 7d", errUsage, s)
}

func cacheRemove(w io.Writer, kdir, wdir string, o cacheOpts) error {
	kinds := 0
	for _, b := range []bool{o.all, o.weights, o.kernels} {
		if b {
			kinds++
		}
	}
	if kinds > 1 {
		return fmt.Errorf("%w: give one of --all, --weights and --kernels", errUsage)
	}
	var cutoff time.Time
	if o.olderThan != "" {
		d, err := parseAge(o.olderThan)
		if err != nil {
			return err
		}
		cutoff = time.Now().Add(-d)
	} else if kinds == 0 {
		return fmt.Errorf("%w: cache remove needs --all, --weights, --kernels or --older-than", errUsage)
	}
	doKernels, doWeights := !o.weights, !o.kernels
	ents, err := allEntries(kdir, wdir)
	if err != nil {
		return err
	}
	var n [2]int
	var b [2]int64
	var errs []error
	for _, e := range ents {
		k := 0
		if e.Kind == "weight" {
			k = 1
		}
		if (k == 0 && !doKernels) || (k == 1 && !doWeights) || (!cutoff.IsZero() && !e.Used.Before(cutoff)) {
			continue
		}
		if err := os.Remove(e.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n[k]++
		b[k] += e.Size
	}
	memos := 0
	if doWeights && cutoff.IsZero() {
		// The memo only saves hashing: it goes with the entries.
		for _, m := range memoFiles(wdir) {
			if os.Remove(m) == nil {
				memos++
			}
		}
	}
	fmt.Fprintf(w, "removed %d kernel entries (%s) and %d weight entries (%s)", n[0], lower.FormatBytes(b[0]), n[1], lower.FormatBytes(b[1]))
	if memos > 0 {
		fmt.Fprintf(w, " and %d source hash memos", memos)
	}
	fmt.Fprintln(w)
	return errors.Join(errs...)
}
