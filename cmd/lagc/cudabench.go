package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"lagc/cuda"
)

func init() {
	register(&command{
		name:    "cuda-bench",
		summary: "GPU microbenchmark: launch vs graph replay cost, copy bandwidth",
		usage:   "cuda-bench [--runs N] [--launches N] [--json]",
		setup: func(fs *flag.FlagSet) func([]string) error {
			o := cudaBenchOpts{}
			fs.IntVar(&o.device, "device", 0, "CUDA device ordinal")
			fs.IntVar(&o.runs, "runs", 7, "runs of each measurement; the median is reported")
			fs.IntVar(&o.launches, "launches", 2000, "kernel launches per run")
			fs.IntVar(&o.graphKernels, "graph-kernels", 100, "kernels captured in one graph")
			fs.IntVar(&o.hostMiB, "host-mib", 256, "size of each host<->device copy, MiB")
			fs.IntVar(&o.devMiB, "dev-mib", 1024, "size of each device-to-device copy, MiB")
			fs.Float64Var(&o.refD2D, "ref-d2d", 4.3e12, "device copy ceiling, bytes/s read+written (an H200 copy measured 4.3 TB/s)")
			fs.Float64Var(&o.refH2D, "ref-h2d", 64e9, "host link ceiling, bytes/s per direction (PCIe 5.0 x16: 64 GB/s)")
			fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			return func(args []string) error {
				if len(args) != 0 {
					return fmt.Errorf("%w: cuda-bench takes no arguments", errUsage)
				}
				if o.runs < 1 || o.launches < 1 || o.graphKernels < 1 || o.hostMiB < 1 || o.devMiB < 1 {
					return fmt.Errorf("%w: counts and sizes must be positive", errUsage)
				}
				return runCudaBench(o, os.Stdout)
			}
		},
	})
}

type cudaBenchOpts struct {
	device, runs, launches, graphKernels, hostMiB, devMiB int
	refD2D, refH2D                                        float64
	json                                                  bool
}

// launchRow is one kernel's launch costs, microseconds (medians).
type launchRow struct {
	Kernel            string  `json:"kernel"`
	EagerHostUs       float64 `json:"eager_host_us_per_launch"` // wall time of Launch calls
	EagerGPUUs        float64 `json:"eager_gpu_us_per_kernel"`  // event time / launches
	GraphGPUUs        float64 `json:"graph_gpu_us_per_kernel"`  // event time / (replays * kernels)
	GraphHostUsReplay float64 `json:"graph_host_us_per_replay"` // wall time of one graph launch call
	Speedup           float64 `json:"eager_over_graph"`
}

type bwRow struct {
	Copy     string  `json:"copy"`
	Bytes    int64   `json:"bytes_moved"` // counted: D2D counts read + write
	Seconds  float64 `json:"seconds"`
	GBps     float64 `json:"gb_per_s"`
	Ref      float64 `json:"reference_gb_per_s"`
	Fraction float64 `json:"fraction_of_reference"`
}

type cudaBenchReport struct {
	Device       string      `json:"device"`
	Arch         string      `json:"arch"`
	SMs          int         `json:"sms"`
	MemGiB       float64     `json:"mem_gib"`
	Driver       int         `json:"driver_version"`
	NVRTC        string      `json:"nvrtc_version"`
	Runs         int         `json:"runs"`
	CompileMs    float64     `json:"nvrtc_compile_ms"`   // cold compile of axpy<float>
	CacheLoadMs  float64     `json:"disk_cache_load_ms"` // same kernel from the on-disk cache
	Launch       []launchRow `json:"launch"`
	Bandwidth    []bwRow     `json:"bandwidth"`
	GraphKernels int         `json:"graph_kernels"`
	Launches     int         `json:"launches_per_run"`
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func runCudaBench(o cudaBenchOpts, w io.Writer) error {
	// A private kernel cache: the compile figure is a cold NVRTC compile and
	// the user's cache is left alone.
	cacheDir, err := os.MkdirTemp("", "lagc-bench-kernels-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	os.Setenv(cuda.EnvCacheDir, cacheDir)

	d, err := cuda.Open(o.device)
	if err != nil {
		return err
	}
	defer d.Close()
	nv, err := cuda.NVRTCVersion()
	if err != nil {
		return err
	}
	p := d.Props()
	rep := cudaBenchReport{Device: p.Name, Arch: d.Arch(), SMs: p.SMs, MemGiB: float64(p.TotalMem) / (1 << 30),
		Driver: p.DriverVersion, NVRTC: nv, Runs: o.runs, GraphKernels: o.graphKernels, Launches: o.launches}

	ctx := context.Background()
	axpySpec, err := cuda.EmbeddedSpec("bench.cu", "axpy", cuda.F32)
	if err != nil {
		return err
	}
	t0 := time.Now()
	axpy, err := d.Compile(ctx, axpySpec)
	if err != nil {
		return err
	}
	rep.CompileMs = msSince(t0)
	if d2, err := cuda.Open(o.device); err == nil { // fresh memory cache: served from disk
		t0 = time.Now()
		if _, err := d2.Compile(ctx, axpySpec); err == nil && d2.CacheStats().DiskHits == 1 {
			rep.CacheLoadMs = msSince(t0)
		}
		d2.Close()
	}
	// bench.cu's untemplated kernels, compiled (or loaded from the cache).
	benchKernel := func(name string) (*cuda.Kernel, error) {
		spec, err := cuda.EmbeddedSpec("bench.cu", name)
		if err != nil {
			return nil, err
		}
		return d.Compile(ctx, spec)
	}
	noop, err := benchKernel("noop")
	if err != nil {
		return err
	}
	copyK, err := benchKernel("copy16")
	if err != nil {
		return err
	}
	runsK, err := benchKernel("read_runs")
	if err != nil {
		return err
	}

	s, err := d.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	e0, err := d.NewEvent()
	if err != nil {
		return err
	}
	defer e0.Close()
	e1, err := d.NewEvent()
	if err != nil {
		return err
	}
	defer e1.Close()

	const axpyN = 4096
	x, err := d.Alloc(4 * axpyN)
	if err != nil {
		return err
	}
	defer d.Free(x)
	y, err := d.Alloc(4 * axpyN)
	if err != nil {
		return err
	}
	defer d.Free(y)
	if err := s.Memset32(x, 0, axpyN); err != nil {
		return err
	}
	if err := s.Memset32(y, 0, axpyN); err != nil {
		return err
	}

	kernels := []struct {
		name   string
		launch func() error
	}{
		{"noop<<<1,32>>>", func() error { return s.Launch(noop, cuda.Dim(1), cuda.Dim(32), 0) }},
		{"axpy<float> n=4096", func() error {
			return s.Launch(axpy, cuda.Dim(axpyN/256), cuda.Dim(256), 0, int64(axpyN), float32(1), x, y)
		}},
	}
	for _, k := range kernels {
		row, err := benchLaunch(o, s, e0, e1, k.name, k.launch)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		rep.Launch = append(rep.Launch, row)
	}

	bw, err := benchBandwidth(o, d, s, e0, e1, copyK, runsK)
	if err != nil {
		return err
	}
	rep.Bandwidth = bw

	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printCudaBench(w, rep, o)
	return nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e6 }

// timed records e0, runs f, records e1 and returns the GPU time between
// the events and the host time f took, in seconds.
func timed(s *cuda.Stream, e0, e1 *cuda.Event, f func() error) (gpu, host float64, err error) {
	if err = s.Record(e0); err != nil {
		return
	}
	t := time.Now()
	if err = f(); err != nil {
		return
	}
	host = time.Since(t).Seconds()
	if err = s.Record(e1); err != nil {
		return
	}
	if err = e1.Synchronize(); err != nil {
		return
	}
	el, err := cuda.Elapsed(e0, e1)
	return el.Seconds(), host, err
}

func benchLaunch(o cudaBenchOpts, s *cuda.Stream, e0, e1 *cuda.Event, name string, launch func() error) (launchRow, error) {
	eager := func() error {
		for i := 0; i < o.launches; i++ {
			if err := launch(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := eager(); err != nil { // warm up
		return launchRow{}, err
	}
	if err := s.Synchronize(); err != nil {
		return launchRow{}, err
	}
	var eg, eh []float64
	for r := 0; r < o.runs; r++ {
		g, h, err := timed(s, e0, e1, eager)
		if err != nil {
			return launchRow{}, err
		}
		eg = append(eg, g/float64(o.launches)*1e6)
		eh = append(eh, h/float64(o.launches)*1e6)
	}

	g, err := s.Capture(func() error {
		for i := 0; i < o.graphKernels; i++ {
			if err := launch(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return launchRow{}, err
	}
	defer g.Close()
	ex, err := g.Instantiate()
	if err != nil {
		return launchRow{}, err
	}
	defer ex.Close()
	replays := (o.launches + o.graphKernels - 1) / o.graphKernels
	replay := func() error {
		for i := 0; i < replays; i++ {
			if err := ex.Launch(s); err != nil {
				return err
			}
		}
		return nil
	}
	if err := replay(); err != nil {
		return launchRow{}, err
	}
	var gg, gh []float64
	for r := 0; r < o.runs; r++ {
		gpu, host, err := timed(s, e0, e1, replay)
		if err != nil {
			return launchRow{}, err
		}
		gg = append(gg, gpu/float64(replays*o.graphKernels)*1e6)
		gh = append(gh, host/float64(replays)*1e6)
	}
	row := launchRow{Kernel: name, EagerHostUs: median(eh), EagerGPUUs: median(eg), GraphGPUUs: median(gg), GraphHostUsReplay: median(gh)}
	if row.GraphGPUUs > 0 {
		row.Speedup = row.EagerGPUUs / row.GraphGPUUs
	}
	return row, nil
}

func benchBandwidth(o cudaBenchOpts, d *cuda.Device, s *cuda.Stream, e0, e1 *cuda.Event, copyK, runsK *cuda.Kernel) ([]bwRow, error) {
	hostN := o.hostMiB << 20
	devN := int64(o.devMiB) << 20
	h, err := d.AllocHost(hostN)
	if err != nil {
		return nil, err
	}
	defer h.Free()
	b := h.Bytes()
	for i := range b {
		b[i] = byte(i)
	}
	src, err := d.Alloc(devN)
	if err != nil {
		return nil, err
	}
	defer d.Free(src)
	dst, err := d.Alloc(devN)
	if err != nil {
		return nil, err
	}
	defer d.Free(dst)
	if err := s.Memset8(src, 1, devN); err != nil {
		return nil, err
	}
	n16 := devN / 16
	grid := uint32(d.Props().SMs * 8)
	cases := []struct {
		name  string
		bytes int64
		ref   float64
		f     func() error
	}{
		{"H2D pinned", int64(hostN), o.refH2D, func() error { return s.CopyHtoDAsync(src, h, 0, hostN) }},
		{"D2H pinned", int64(hostN), o.refH2D, func() error { return s.CopyDtoHAsync(h, 0, src, hostN) }},
		{"D2D memcpy (read+write)", 2 * devN, o.refD2D, func() error { return s.CopyDtoD(dst, src, devN) }},
		{"D2D copy16 kernel (read+write)", 2 * devN, o.refD2D, func() error {
			return s.Launch(copyK, cuda.Dim(grid), cuda.Dim(512), 0, n16, src, dst)
		}},
	}
	// The weight reads of a grouped GEMM's stages: src as rows of 6 KiB
	// (an S-2.1 expert row of 3072 bf16), 256-row groups, runs of each
	// length a row a k-block, by one 1024-thread block an SM (one CTA of
	// the GEMM) and by eight of 512 threads.
	const ld, groupRows = 6144, 256
	nrows := devN / ld / groupRows * groupRows
	for _, run := range []int{128, 256, 512, 1024, 6144} {
		for _, v := range []struct{ perSM, threads int }{{1, 1024}, {8, 512}} {
			g := uint32(d.Props().SMs * v.perSM)
			cases = append(cases, struct {
				name  string
				bytes int64
				ref   float64
				f     func() error
			}{fmt.Sprintf("read runs of %d B from 256 rows, %d block(s)/SM (read)", run, v.perSM), nrows * ld, o.refD2D, func() error {
				return s.Launch(runsK, cuda.Dim(g), cuda.Dim(uint32(v.threads)), 0, nrows, int64(ld), int32(groupRows), int32(run), src, dst)
			}})
		}
	}
	var rows []bwRow
	for _, c := range cases {
		if err := c.f(); err != nil { // warm up
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		var ts []float64
		for r := 0; r < o.runs; r++ {
			g, _, err := timed(s, e0, e1, c.f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			ts = append(ts, g)
		}
		sec := median(ts)
		rate := float64(c.bytes) / sec
		rows = append(rows, bwRow{Copy: c.name, Bytes: c.bytes, Seconds: sec, GBps: rate / 1e9, Ref: c.ref / 1e9, Fraction: rate / c.ref})
	}
	return rows, nil
}

func printCudaBench(w io.Writer, r cudaBenchReport, o cudaBenchOpts) {
	fmt.Fprintf(w, "device: %s (%s, %d SMs, %.1f GiB), driver %d, NVRTC %s\n", r.Device, r.Arch, r.SMs, r.MemGiB, r.Driver, r.NVRTC)
	fmt.Fprintf(w, "NVRTC compile of axpy<float> (cold): %.1f ms; load from disk cache: %.1f ms\n\n", r.CompileMs, r.CacheLoadMs)
	fmt.Fprintf(w, "launch cost, median of %d runs of %d launches; graphs of %d kernels\n", r.Runs, r.Launches, r.GraphKernels)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kernel\teager host us/launch\teager GPU us/kernel\tgraph GPU us/kernel\tgraph host us/replay\teager/graph\t")
	for _, l := range r.Launch {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.1fx\t\n", l.Kernel, l.EagerHostUs, l.EagerGPUUs, l.GraphGPUUs, l.GraphHostUsReplay, l.Speedup)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nbandwidth, median of %d runs (D2D counts bytes read and written)\n", r.Runs)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "copy\tMiB moved\tms\tGB/s\treference GB/s\tfraction\t")
	for _, b := range r.Bandwidth {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.1f\t%.0f\t%.1f%%\t\n", b.Copy, b.Bytes>>20, b.Seconds*1e3, b.GBps, b.Ref, 100*b.Fraction)
	}
	tw.Flush()
}
