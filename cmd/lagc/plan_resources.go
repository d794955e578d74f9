package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"

	"lagc/cuda"
	"lagc/exec/gpu"
	"lagc/lower"
)

// resourceRow is one launch of the decode step after another: the same
// pair may recur once a layer (count).
type resourceRow struct {
	prev  *lower.Launch // nil: the step's first launch
	l     lower.Launch
	count int
}

func launchKey(l lower.Launch) string {
	return fmt.Sprintf("%s %v %v %d", l.NameExpr(), l.Grid, l.Block, l.Shmem)
}

func blocks(d [3]int) int { return d[0] * d[1] * d[2] }

// printResources writes what each kernel launch of p's decode step takes
// of a multiprocessor (compiled by NVRTC for the plan's compute capability,
// no GPU needed) and, for each launch after another, how many of its blocks
// fit on the SMs while the one before it holds all its blocks that fit at
// once: under programmatic dependent launch those can run their work
// before griddepcontrol.wait early; the rest start as the blocks before
// exit. progress gets a line before the compiles.
func printResources(w, progress io.Writer, p *lower.Plan) error {
	if p.CC != 90 {
		return fmt.Errorf("%w: --resources knows the multiprocessor of compute capability 9.0 (H100, H200) only, not %d.%d", errUsage, p.CC/10, p.CC%10)
	}
	ver, err := cuda.NVRTCVersion()
	if err != nil {
		return fmt.Errorf("--resources compiles each kernel with NVRTC, which is unavailable: %w (scripts/nvrtc-local.sh installs one on a machine without CUDA)", err)
	}
	var seq []lower.Launch
	for _, st := range p.Decode.Steps {
		seq = append(seq, st.Launches...)
	}
	seq = append(seq, p.Decode.Finish...)
	var rows []*resourceRow
	index := map[string]*resourceRow{}
	kernels := map[string]lower.Launch{}
	var prev *lower.Launch
	n := 0
	for i := range seq {
		l := seq[i]
		if l.Kernel == lower.Memcpy || l.File == "" {
			continue
		}
		n++
		kernels[l.NameExpr()] = l
		key := launchKey(l)
		if prev != nil {
			key = launchKey(*prev) + " -> " + key
		}
		r := index[key]
		if r == nil {
			r = &resourceRow{prev: prev, l: l}
			index[key] = r
			rows = append(rows, r)
		}
		r.count++
		prev = &seq[i]
	}
	fmt.Fprintf(progress, "compiling the decode step's %d kernels with NVRTC %s for sm_90a\n", len(kernels), ver)
	res, err := compileResources(kernels)
	if err != nil {
		return err
	}
	lim := cuda.SM90
	fmt.Fprintf(w, "decode step of %s: %d kernel launches, %d kernels (NVRTC %s, sm_90a)\n", p.Model, n, len(kernels), ver)
	fmt.Fprintf(w, "an SM of compute capability 9.0: %d registers in %d sub-partitions, %s of shared memory (%s reserved a block), %d threads, %d blocks; %d SMs\n",
		lim.Registers, lim.SubPartitions, lower.FormatBytes(int64(lim.Shared)), lower.FormatBytes(int64(lim.SharedReserved)), lim.Threads, lim.MaxBlocks, p.SMs)
	names := make([]string, len(rows))
	width := len("launch")
	for i, r := range rows {
		names[i] = r.l.NameExpr()
		if fb := res[names[i]].FrameBytes; fb > 0 {
			names[i] += fmt.Sprintf(" [frame %d B]", fb)
		}
		width = max(width, len(names[i]))
	}
	fmt.Fprintf(w, "%-*s %6s %7s %5s %9s %13s %6s %16s %5s\n", width, "launch", "blocks", "threads", "regs", "shared", "per SM", "waves", "beside the last", "times")
	shape := func(l lower.Launch) cuda.BlockShape {
		return lim.Shape(res[l.NameExpr()], blocks(l.Block), l.Shmem)
	}
	for i, r := range rows {
		b := shape(r.l)
		alone, why, err := lim.Fit(cuda.SMLoad{}, b)
		if err != nil {
			return fmt.Errorf("%s: %w", r.l.NameExpr(), err)
		}
		g := blocks(r.l.Grid)
		beside := "-"
		if r.prev != nil {
			e, err := early(lim, p.SMs, shape(*r.prev), blocks(r.prev.Grid), b, g)
			if err != nil {
				return fmt.Errorf("%s after %s: %w", r.l.NameExpr(), r.prev.NameExpr(), err)
			}
			beside = fmt.Sprintf("%d of %d", e, g)
		}
		fmt.Fprintf(w, "%-*s %6d %7d %5d %9s %13s %6.2f %16s %5d\n", width, names[i], g, b.Threads, b.Registers,
			lower.FormatBytes(int64(b.Shared)), fmt.Sprintf("%d (%s)", alone, why), float64(g)/float64(alone*p.SMs), beside, r.count)
	}
	fmt.Fprintf(w, "per SM: its blocks alone on an SM (the resource that stops one more); waves: blocks over per SM times the SMs;\n"+
		"beside the last: its blocks that fit on the SMs while the launch before holds its first wave (spread evenly): under programmatic\n"+
		"dependent launch only these can start before the last launch's blocks exit; times: how often the pair recurs in a step\n")
	return nil
}

// early is how many of g blocks of b fit on sms SMs that hold the first
// wave of gp blocks of bp, spread as evenly as the SMs take them.
func early(lim cuda.SMLimits, sms int, bp cuda.BlockShape, gp int, b cuda.BlockShape, g int) (int, error) {
	per, _, err := lim.Fit(cuda.SMLoad{}, bp)
	if err != nil {
		return 0, err
	}
	wave := min(gp, per*sms)
	q, r := wave/sms, wave%sms
	fit := func(k int) (int, error) {
		n, _, err := lim.Fit(lim.Add(cuda.SMLoad{}, bp, k), b)
		return n, err
	}
	hi, err := fit(q + 1)
	if err != nil {
		return 0, err
	}
	lo, err := fit(q)
	if err != nil {
		return 0, err
	}
	return min(g, r*hi+(sms-r)*lo), nil
}

// compileResources compiles each kernel (by instantiation) once, as many
// at a time as there are cores (NVRTC compiles are independent).
func compileResources(kernels map[string]lower.Launch) (map[string]cuda.KernelResources, error) {
	names := make([]string, 0, len(kernels))
	for n := range kernels {
		names = append(names, n)
	}
	out := make(map[string]cuda.KernelResources, len(names))
	errs := make([]string, 0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan string)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for n := range next {
				r, err := gpu.LaunchResources(kernels[n], "sm_90a")
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else {
					out[n] = r
				}
				mu.Unlock()
			}
		})
	}
	for _, n := range names {
		next <- n
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("--resources: %s", strings.Join(errs, "; "))
	}
	return out, nil
}
