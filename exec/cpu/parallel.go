// Package cpu is lagc's reference executor: every op of docs/CONTRACTS.md as
// plain float32 Go over row-major slices with explicit dimensions, plus the
// per-layer KV caches and the token sampler. It is the oracle the CUDA
// kernels are checked against, so each kernel computes every output element
// in one fixed order that does not depend on the number of tokens in the
// step or on the number of threads: a prompt run in one call and the same
// prompt fed one token at a time give bitwise identical results.
//
// Kernels return an error, never panic, when the slices do not match the
// dimensions they are given.
package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// minParallelWork is the estimated work (multiply-adds) below which a kernel
// runs on the calling goroutine. Starting and waking goroutines cost tens of
// microseconds on a small machine, the time of about 1<<19 multiply-adds:
// split below 1<<20, decode of the bundled model ran slower on 2 threads
// than on 1. A helper pool spinning between kernels was tried and was
// slower still on a shared machine. The tests lower it to 1 so that small
// shapes split too.
var minParallelWork = 1 << 20

var maxThreads atomic.Int32 // 0: runtime.GOMAXPROCS

// SetMaxThreads bounds the goroutines one kernel call uses; n <= 0 restores
// the default, runtime.GOMAXPROCS(0). Results do not depend on it.
func SetMaxThreads(n int) {
	if n < 0 {
		n = 0
	}
	maxThreads.Store(int32(n))
}

// procs caches runtime.GOMAXPROCS(0), which takes the scheduler's lock:
// every kernel call asks. The executor refreshes it once a step; kernels
// called on their own read GOMAXPROCS until then.
var procs atomic.Int32

func refreshProcs() { procs.Store(int32(runtime.GOMAXPROCS(0))) }

// Threads returns the number of goroutines a kernel call may use.
func Threads() int {
	if n := int(maxThreads.Load()); n > 0 {
		return n
	}
	if n := int(procs.Load()); n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// parallelFor runs fn over [0, n) split into contiguous chunks. itemWork is
// the estimated multiply-adds of one item; small loops run inline. Items are
// independent, so the split never changes a result.
func parallelFor(n, itemWork int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := Threads()
	if workers > n {
		workers = n
	}
	if itemWork < 1 {
		itemWork = 1
	}
	if total := n * itemWork; workers <= 1 || total < minParallelWork || total < 0 {
		// total < 0: overflow; cannot happen for real shapes, run inline.
		fn(0, n)
		return
	}
	// A few chunks per worker so uneven items (causal attention rows) balance.
	chunks := workers * 4
	if chunks > n {
		chunks = n
	}
	size := (n + chunks - 1) / chunks
	var next atomic.Int64
	loop := func() {
		for {
			lo := int(next.Add(int64(size))) - size
			if lo >= n {
				return
			}
			fn(lo, min(lo+size, n))
		}
	}
	// The caller is one of the workers: one goroutine fewer to start and
	// wake.
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for w := 1; w < workers; w++ {
		go func() {
			defer wg.Done()
			loop()
		}()
	}
	loop()
	wg.Wait()
}
