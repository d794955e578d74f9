package gpu

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/google/pprof/profile"

	"lagc/cuda"
	"lagc/lower"
)

// Profiling: in eager mode with Options.Profile, every launcher call is
// bracketed by two CUDA events, and the GPU time between them is added to
// its graph node. WriteProfile writes the totals as a pprof profile whose
// samples have the synthetic stack class -> layer -> op -> node (so
// `go tool pprof -top` lists nodes, -tree shows layers) and labels class,
// node, op, launcher and layer.
//
// Between the events the GPU may also wait for the host to queue the
// kernel: for kernels shorter than a launch (a few microseconds) the time
// includes that gap, which is what eager decode costs. A kernel's first
// launch also waits for its compilation (NVRTC, unless cached on disk), so
// the first decode step after profiling starts is dropped; prefill chunks
// are all kept (the first may carry compile time: warm up first, as
// `lagc bench` does).

type profKey struct {
	class, node, op, launcher string
	layer                     int
}

type profVal struct {
	launches int64
	gpu      time.Duration
}

type pendingTiming struct {
	key        profKey
	start, end int
}

type profiler struct {
	dev     *cuda.Device
	events  []*cuda.Event
	used    int
	pending []pendingTiming
	totals  map[profKey]*profVal
	steps   map[string]int // steps run per class
	dropped bool           // the first decode step was discarded
}

func newProfiler(dev *cuda.Device) *profiler {
	return &profiler{dev: dev, totals: map[profKey]*profVal{}, steps: map[string]int{}}
}

func (p *profiler) event() (int, error) {
	if p.used == len(p.events) {
		ev, err := p.dev.NewEvent()
		if err != nil {
			return 0, err
		}
		p.events = append(p.events, ev)
	}
	p.used++
	return p.used - 1, nil
}

// timed runs f between two events recorded on s.
func (p *profiler) timed(s *cuda.Stream, class string, st *lower.Step, launcher string, f func() error) error {
	a, err := p.event()
	if err != nil {
		return err
	}
	b, err := p.event()
	if err != nil {
		return err
	}
	if err := s.Record(p.events[a]); err != nil {
		return err
	}
	if err := f(); err != nil {
		return err
	}
	if err := s.Record(p.events[b]); err != nil {
		return err
	}
	p.pending = append(p.pending, pendingTiming{profKey{class, st.Name, st.Op, launcher, st.Layer}, a, b})
	return nil
}

// collect waits for the recorded events and adds their times.
func (p *profiler) collect(class string) error {
	if p.used > 0 {
		if err := p.events[p.used-1].Synchronize(); err != nil {
			return err
		}
	}
	if class == lower.Decode && !p.dropped {
		p.dropped = true
		p.pending, p.used = p.pending[:0], 0
		return nil
	}
	p.steps[class]++
	for _, t := range p.pending {
		d, err := cuda.Elapsed(p.events[t.start], p.events[t.end])
		if err != nil {
			return fmt.Errorf("profile: %w", err)
		}
		v := p.totals[t.key]
		if v == nil {
			v = &profVal{}
			p.totals[t.key] = v
		}
		v.launches++
		v.gpu += d
	}
	p.pending, p.used = p.pending[:0], 0
	return nil
}

func (p *profiler) close() {
	for _, e := range p.events {
		_ = e.Close()
	}
	p.events = nil
}

// StartProfile starts timing every launch (decode runs eagerly while it
// is on), discarding earlier timings.
func (e *Executor) StartProfile() {
	e.settle()
	if e.prof != nil {
		e.prof.close()
	}
	e.prof = newProfiler(e.dev)
}

// StopProfile stops timing and returns what was measured.
func (e *Executor) StopProfile() ([]ProfileEntry, map[string]int) {
	entries, steps := e.ProfileEntries()
	if e.prof != nil {
		e.prof.close()
		e.prof = nil
	}
	return entries, steps
}

// ProfileEntry is one (node, launcher) row of the profile.
type ProfileEntry struct {
	Class, Node, Op, Launcher string
	Layer                     int
	Launches                  int64
	GPU                       time.Duration
}

// ProfileEntries returns the accumulated GPU times, largest first, and the
// number of steps run per class (decode steps, prefill chunks).
func (e *Executor) ProfileEntries() ([]ProfileEntry, map[string]int) {
	if e.prof == nil {
		return nil, nil
	}
	var out []ProfileEntry
	for k, v := range e.prof.totals {
		out = append(out, ProfileEntry{k.class, k.node, k.op, k.launcher, k.layer, v.launches, v.gpu})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPU != out[j].GPU {
			return out[i].GPU > out[j].GPU
		}
		return out[i].Node+out[i].Launcher < out[j].Node+out[j].Launcher
	})
	steps := map[string]int{}
	for c, n := range e.prof.steps {
		steps[c] = n
	}
	return out, steps
}

func layerName(l int) string {
	if l < 0 {
		return "outside layers"
	}
	return fmt.Sprintf("layer %d", l)
}

// BuildProfile turns profile entries into a pprof profile.
func BuildProfile(entries []ProfileEntry, steps map[string]int) (*profile.Profile, error) {
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "launches", Unit: "count"}, {Type: "gpu_time", Unit: "nanoseconds"}},
		DefaultSampleType: "gpu_time",
		PeriodType:        &profile.ValueType{Type: "gpu_time", Unit: "nanoseconds"},
		Period:            1,
	}
	var classes []string
	for c, n := range steps {
		classes = append(classes, fmt.Sprintf("%s steps: %d", c, n))
	}
	sort.Strings(classes)
	p.Comments = append([]string{"lagc: GPU time per kernel launch (CUDA events, eager mode)"}, classes...)
	funcs := map[string]*profile.Location{}
	loc := func(name string) *profile.Location {
		if l, ok := funcs[name]; ok {
			return l
		}
		f := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name}
		p.Function = append(p.Function, f)
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
		p.Location = append(p.Location, l)
		funcs[name] = l
		return l
	}
	for _, e := range entries {
		// Leaf first: node <- op <- layer <- class. Names are qualified so a
		// node frame never merges with an op frame of the same name.
		stack := []*profile.Location{
			loc(e.Node), loc("op " + e.Op), loc(e.Class + " " + layerName(e.Layer)), loc(e.Class),
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: stack,
			Value:    []int64{e.Launches, e.GPU.Nanoseconds()},
			Label:    map[string][]string{"class": {e.Class}, "node": {e.Node}, "op": {e.Op}, "launcher": {e.Launcher}},
			NumLabel: map[string][]int64{"layer": {int64(e.Layer)}},
			// A unit keeps layer 0 through encoding (a bare 0 is dropped).
			NumUnit: map[string][]string{"layer": {"index"}},
		})
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return p, nil
}

// WriteProfile writes the GPU time of every kernel so far as a gzipped
// pprof profile (see the file comment). It needs Options.Profile.
func (e *Executor) WriteProfile(w io.Writer) error {
	if e.prof == nil {
		return fmt.Errorf("gpu: profiling is off (Options.Profile)")
	}
	entries, steps := e.ProfileEntries()
	p, err := BuildProfile(entries, steps)
	if err != nil {
		return err
	}
	return p.Write(w)
}
