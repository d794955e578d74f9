package gpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"lagc/ckpt"
	"lagc/lower"
	"lagc/progress"
	"lagc/wcache"
)

// EnvWeightCache set to "off" converts every weight at load instead of
// using the on-disk weight cache, "all" caches quantised weights too
// (Options.CacheQuantised); EnvWeightCacheMax caps the cache's size
// (bytes, with an optional K, M, G or T suffix, powers of 1024): after a
// load the least recently used entries beyond it are removed.
const (
	EnvWeightCache    = "LAGC_WEIGHT_CACHE"
	EnvWeightCacheMax = "LAGC_WEIGHT_CACHE_MAX"
)

// weightFormat versions how convertWeight turns checkpoint bytes into
// device bytes, beyond the quantised layout (lower.QuantLayoutVersion):
// bump it when the float conversion, a derivation or a split changes, so
// that cached weights of the old form are not used.
const weightFormat = 1

// LoadStats says how the weights of a load were prepared. Wall is the
// whole load; the stage times are summed over the workers, which run at
// once, so they add up to more than Wall.
type LoadStats struct {
	Weights  int    // weights uploaded
	Bytes    int64  // their device bytes
	Hits     int    // weights copied from the weight cache
	HitBytes int64  // their device bytes
	Written  int    // cache entries written
	Rebuilt  int    // damaged entries found (and rebuilt)
	Repacked int    // quantised weights repacked without the cache (Options.CacheQuantised off)
	Cache    string // the cache directory, or "off: WHY"
	Workers  int    // weights prepared at once, at most
	Budget   int64  // host bytes held by weights in flight, at most

	HashedBytes   int64 // source bytes hashed for cache keys
	MemoisedBytes int64 // source bytes whose hash came from the memo

	Start   time.Time
	Wall    time.Duration
	Hash    time.Duration // reading and hashing sources for keys
	Read    time.Duration // mapping and verifying cache entries
	Convert time.Duration // reading sources and converting (misses, or no cache)
	Write   time.Duration // writing cache entries
	Upload  time.Duration // copies to the device (one goroutine, in plan order)
}

// loadConfig is how hostLoad prepares weights.
type loadConfig struct {
	cache   *wcache.Cache  // nil: convert everything
	quant   bool           // cache quantised weights too
	hasher  *wcache.Hasher // content hashes (with cache)
	off     string         // why cache is nil, for LoadStats.Cache
	workers int
	budget  int64
	warn    func(msg string) // damaged entries, write failures; nil: silent
	source  string           // the checkpoint, recorded in entries
	// failed says which cache failures were warned about: an entry that
	// cannot be read (other than missing or damaged) or written (a full or
	// read-only disk) is reported once; after a failed write no more are
	// tried.
	failed *loadFailures
}

type loadFailures struct{ read, write atomic.Bool }

// warnf reports through c.warn, if set.
func (c loadConfig) warnf(format string, a ...any) {
	if c.warn != nil {
		c.warn(fmt.Sprintf(format, a...))
	}
}

// ExtentSource is a WeightSource that says where each tensor's stored bytes
// lie (ckpt.Checkpoint values from ckpt.Open do): what the weight cache
// keys entries by. Other sources are converted on every load.
type ExtentSource interface {
	Extents(name string) ([]ckpt.Extent, error)
}

// prepared is one weight ready for the device: converted bytes, or a
// mapped cache entry released after the copy.
type prepared struct {
	data    []byte
	release func()
	err     error
}

// hostLoad prepares every uploaded weight of p (Offset >= 0) with up to
// c.workers at once and at most c.budget bytes in flight, and hands each
// to sink in plan order from the calling goroutine (where device copies
// must be made). A weight larger than the budget runs alone.
func hostLoad(p *lower.Plan, ws WeightSource, c loadConfig, sink func(i int, b []byte) error) (LoadStats, error) {
	t0 := time.Now()
	st := LoadStats{Start: t0, Workers: max(c.workers, 1), Budget: max(c.budget, 1), Cache: c.off}
	if c.cache != nil {
		st.Cache = c.cache.Dir()
	}
	var order []int
	for i, w := range p.Weights {
		if w.Offset >= 0 {
			order = append(order, i)
		}
	}
	cost := func(i int) int64 { return min(hostCost(p, i), st.Budget) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := semaphore.NewWeighted(st.Budget)
	workers := make(chan struct{}, st.Workers)
	results := make([]chan prepared, len(order))
	for k := range results {
		results[k] = make(chan prepared, 1)
	}
	var mu sync.Mutex // guards acc, the workers' counters
	var acc LoadStats
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // dispatch in plan order: memory is granted in the order sink needs it
		defer wg.Done()
		for k, i := range order {
			if err := sem.Acquire(ctx, cost(i)); err != nil {
				return
			}
			select {
			case workers <- struct{}{}:
			case <-ctx.Done():
				sem.Release(cost(i))
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-workers }()
				var ws1 workerStats
				r := prepareWeight(p, ws, c, i, &ws1)
				mu.Lock()
				acc.add(ws1)
				mu.Unlock()
				results[k] <- r
			}()
		}
	}()

	var err error
	for k, i := range order {
		var r prepared
		select {
		case r = <-results[k]:
		case <-ctx.Done():
		}
		if r.err == nil {
			t := time.Now()
			r.err = sink(i, r.data)
			st.Upload += time.Since(t)
			st.Weights++
			st.Bytes += p.Weights[i].Bytes
		}
		if r.release != nil {
			r.release()
		}
		sem.Release(cost(i))
		if r.err != nil {
			err = r.err
			break
		}
	}
	if err != nil {
		cancel()
		wg.Wait()
		for _, ch := range results { // prepared after the failure: release
			select {
			case r := <-ch:
				if r.release != nil {
					r.release()
				}
			default:
			}
		}
	} else {
		wg.Wait()
	}
	st.Hits, st.HitBytes, st.Written, st.Rebuilt, st.Repacked = acc.Hits, acc.HitBytes, acc.Written, acc.Rebuilt, acc.Repacked
	st.Hash, st.Read, st.Convert, st.Write = acc.Hash, acc.Read, acc.Convert, acc.Write
	if c.hasher != nil {
		st.HashedBytes, st.MemoisedBytes = c.hasher.Bytes()
		if e := c.hasher.Save(); e != nil && c.warn != nil {
			c.warn(e.Error())
		}
	}
	st.Wall = time.Since(t0)
	return st, err
}

// hostCost is what preparing weight i may hold in host memory at once: its
// device bytes, plus joined and split copies of its blocks (quantised;
// none for a gate_up stack repacked in place) or float32 values (sources
// of derived weights included).
func hostCost(p *lower.Plan, i int) int64 {
	w := p.Weights[i]
	switch {
	case gateUpInPlace(p, i):
		return w.Bytes
	case lower.IsQuantLayout(w.Layout):
		return 3 * w.Bytes
	}
	return w.Bytes + 8*int64(elems(w.Shape))
}

// workerStats are one weight's contributions to LoadStats.
type workerStats struct {
	hit, written, rebuilt      bool
	repacked                   bool
	bytes                      int64
	hash, read, convert, write time.Duration
}

func (s *LoadStats) add(w workerStats) {
	if w.hit {
		s.Hits++
		s.HitBytes += w.bytes
	}
	if w.written {
		s.Written++
	}
	if w.rebuilt {
		s.Rebuilt++
	}
	if w.repacked {
		s.Repacked++
	}
	s.Hash += w.hash
	s.Read += w.read
	s.Convert += w.convert
	s.Write += w.write
}

// prepareWeight is weight i ready for the device: from the cache when its
// entry is there and sound, else converted (and the entry written).
func prepareWeight(p *lower.Plan, ws WeightSource, c loadConfig, i int, st *workerStats) prepared {
	w := p.Weights[i]
	var key wcache.Key
	cached := c.cache != nil && (c.quant || !lower.IsQuantLayout(w.Layout))
	if c.cache != nil && !cached {
		st.repacked = true
	}
	if cached {
		t := time.Now()
		k, err := weightKey(p, i, func(name string) (wcache.Sum, error) { return sourceSum(ws, c.hasher, name) })
		st.hash = time.Since(t)
		if err != nil {
			return prepared{err: err}
		}
		key = k
		t = time.Now()
		e, err := c.cache.Get(key)
		st.read = time.Since(t)
		switch {
		case err == nil && int64(len(e.Data)) == w.Bytes:
			st.hit, st.bytes = true, w.Bytes
			return prepared{data: e.Data, release: func() { e.Close() }}
		case err == nil: // sound, but not this weight's size: a key collision or a bug
			e.Close()
			st.rebuilt = true
			c.warnf("weight cache entry for %s has %d bytes, the plan %d: rebuilt", w.Name, len(e.Data), w.Bytes)
		case errors.Is(err, wcache.ErrCorrupt):
			st.rebuilt = true
			c.warnf("weight cache entry for %s was damaged (%v): rebuilt", w.Name, err)
		case !errors.Is(err, fs.ErrNotExist) && (c.failed == nil || c.failed.read.CompareAndSwap(false, true)):
			c.warnf("weight cache: %v (converting instead)", err)
		}
	}
	t := time.Now()
	b, err := convertWeight(p, ws, i)
	st.convert = time.Since(t)
	if err != nil {
		return prepared{err: err}
	}
	if cached && (c.failed == nil || !c.failed.write.Load()) {
		t = time.Now()
		err := c.cache.Put(key, wcache.Meta{Name: w.Name, DType: w.DType, Shape: w.Shape, Layout: w.Layout, Source: c.source}, b)
		st.write = time.Since(t)
		switch {
		case err == nil:
			st.written = true
		case c.failed == nil:
			c.warnf("%v", err)
		case c.failed.write.CompareAndSwap(false, true):
			c.warnf("%v; loading on without writing entries", err)
		}
	}
	return prepared{data: b}
}

// sourceSum is the content hash of checkpoint tensor name: memoised by
// file identity when ws gives extents, else of its stored bytes.
func sourceSum(ws WeightSource, h *wcache.Hasher, name string) (wcache.Sum, error) {
	if es, ok := ws.(ExtentSource); ok {
		exts, err := es.Extents(name)
		if err != nil {
			return "", fmt.Errorf("weight %s: %w", name, err)
		}
		return h.Sum(exts)
	}
	return "", fmt.Errorf("weight %s: the weight source does not give stored bytes to key a cache entry", name)
}

// keyNode is a weight as its cache key sees it: everything that shapes
// its device bytes, the sources of a derived weight included.
type keyNode struct {
	DType   string     `json:"dtype"`
	Source  string     `json:"source"`
	Shape   []int      `json:"shape"`
	Layout  string     `json:"layout,omitempty"`
	Op      string     `json:"op,omitempty"`
	Axis    int        `json:"axis,omitempty"`
	From    []keyNode  `json:"from,omitempty"`
	Content wcache.Sum `json:"content,omitempty"` // a checkpoint tensor's stored bytes
}

// keyVersions are the versions of what turns source bytes into device
// bytes.
type keyVersions struct {
	Format      int `json:"format"`
	QuantLayout int `json:"quant_layout"`
}

func currentKeyVersions() keyVersions { return keyVersions{weightFormat, lower.QuantLayoutVersion} }

// weightKey is the cache key of weight i: the conversion's and the
// quantised layout's versions, and the weight's keyNode, whose leaves are
// the content hashes sum gives of checkpoint tensors.
func weightKey(p *lower.Plan, i int, sum func(name string) (wcache.Sum, error)) (wcache.Key, error) {
	return weightKeyV(p, i, sum, currentKeyVersions())
}

func weightKeyV(p *lower.Plan, i int, sum func(name string) (wcache.Sum, error), v keyVersions) (wcache.Key, error) {
	var node func(i, depth int) (keyNode, error)
	node = func(i, depth int) (keyNode, error) {
		if i < 0 || i >= len(p.Weights) || depth > len(p.Weights) {
			return keyNode{}, fmt.Errorf("weight #%d: outside the plan or a cycle of derived weights", i)
		}
		w := p.Weights[i]
		n := keyNode{DType: w.DType, Source: w.Source, Shape: w.Shape, Layout: w.Layout}
		if w.From == nil {
			s, err := sum(w.Name)
			n.Content = s
			return n, err
		}
		n.Op, n.Axis = w.From.Op, w.From.Axis
		for _, s := range w.From.Srcs {
			c, err := node(s, depth+1)
			if err != nil {
				return keyNode{}, err
			}
			n.From = append(n.From, c)
		}
		return n, nil
	}
	n, err := node(i, 0)
	if err != nil {
		return "", err
	}
	return wcache.KeyOf(struct {
		Versions keyVersions `json:"versions"`
		Weight   keyNode     `json:"weight"`
	}{v, n})
}

// loadConfigFor is the load of e's options: the default cache unless
// disabled (option or LAGC_WEIGHT_CACHE=off) or ws cannot key entries.
func loadConfigFor(o Options, ws WeightSource, warn func(string)) loadConfig {
	c := loadConfig{workers: runtime.GOMAXPROCS(0), budget: o.LoadMemory, warn: warn, failed: &loadFailures{}}
	if c.budget <= 0 {
		c.budget = defaultLoadBudget()
	}
	if s, ok := ws.(interface{ Path() string }); ok {
		c.source = s.Path()
	}
	v := strings.ToLower(os.Getenv(EnvWeightCache))
	c.quant = o.CacheQuantised || v == "all"
	switch {
	case o.NoWeightCache:
		c.off = "off"
	case v == "off" || v == "0" || v == "false":
		c.off = "off (" + EnvWeightCache + "=" + os.Getenv(EnvWeightCache) + ")"
	default:
		if _, ok := ws.(ExtentSource); !ok {
			c.off = "off: the weight source cannot key entries"
			break
		}
		wc, err := wcache.Default()
		if err != nil {
			c.off = "off: " + err.Error()
			break
		}
		c.cache, c.hasher = wc, wcache.NewHasher(wcache.SourcesDir(wc.Dir()))
	}
	return c
}

// uploadWeights copies every weight a kernel uses to its offset: prepared
// on the host by hostLoad (from the weight cache, or converted), copied to
// the device in plan order. Progress and cache warnings go to
// Options.LoadLog.
func (e *Executor) uploadWeights(ws WeightSource) error {
	var logMu sync.Mutex
	warn := func(msg string) {
		if e.o.LoadLog != nil {
			logMu.Lock()
			fmt.Fprintf(e.o.LoadLog, "warning: %s\n", msg)
			logMu.Unlock()
		}
	}
	c := loadConfigFor(e.o, ws, warn)
	var bar *progress.Bar
	if e.o.LoadLog != nil {
		var total int64
		for _, w := range e.plan.Weights {
			if w.Offset >= 0 {
				total += w.Bytes
			}
		}
		bar = progress.New(e.o.LoadLog, "loading weights", total, "B")
	}
	st, err := hostLoad(e.plan, ws, c, func(i int, b []byte) error {
		w := e.plan.Weights[i]
		if err := e.q.CopyHtoD(e.weights.Add(w.Offset), b); err != nil {
			return fmt.Errorf("uploading weight %s: %w", w.Name, err)
		}
		if bar != nil {
			bar.Add(w.Bytes)
		}
		return nil
	})
	e.loadStats = st
	if err != nil {
		return err
	}
	if bar != nil {
		bar.Done()
		fmt.Fprintln(e.o.LoadLog, st.Summary())
	}
	if c.cache != nil && st.Written > 0 {
		trimWeightCache(c.cache, st.Start, warn)
	}
	return nil
}

// trimWeightCache applies LAGC_WEIGHT_CACHE_MAX, sparing the entries the
// load since t0 used.
func trimWeightCache(c *wcache.Cache, t0 time.Time, warn func(string)) {
	v := os.Getenv(EnvWeightCacheMax)
	if v == "" {
		return
	}
	limit, err := wcache.ParseSize(v)
	if err != nil {
		warn(fmt.Sprintf("%s: %v", EnvWeightCacheMax, err))
		return
	}
	_, over, err := c.Trim(limit, t0)
	if err != nil {
		warn(err.Error())
	} else if over > 0 {
		warn(fmt.Sprintf("the weight cache holds %s more than %s=%s: this model's entries alone exceed it",
			lower.FormatBytes(over), EnvWeightCacheMax, v))
	}
}

// LoadStats says how the executor's weights were loaded (zero for
// synthetic weights).
func (e *Executor) LoadStats() LoadStats { return e.loadStats }

// Summary is one line: the cache's part and the time of each stage.
func (s LoadStats) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "weights: %d (%s) in %.2fs; ", s.Weights, lower.FormatBytes(s.Bytes), s.Wall.Seconds())
	if s.Cache == "" || strings.HasPrefix(s.Cache, "off") {
		fmt.Fprintf(&b, "weight cache %s", s.Cache)
	} else {
		fmt.Fprintf(&b, "weight cache: %d of %d from the cache (%s)", s.Hits, s.Weights, lower.FormatBytes(s.HitBytes))
		if s.Written > 0 {
			fmt.Fprintf(&b, ", %d written", s.Written)
		}
		if s.Rebuilt > 0 {
			fmt.Fprintf(&b, ", %d damaged and rebuilt", s.Rebuilt)
		}
		if s.Repacked > 0 {
			fmt.Fprintf(&b, ", %d quantised repacked (not cached)", s.Repacked)
		}
	}
	fmt.Fprintf(&b, "; summed over %d workers: hashing %.2fs (%s hashed, %s memoised), cache reads %.2fs, converting %.2fs, cache writes %.2fs; uploading %.2fs",
		s.Workers, s.Hash.Seconds(), lower.FormatBytes(s.HashedBytes), lower.FormatBytes(s.MemoisedBytes),
		s.Read.Seconds(), s.Convert.Seconds(), s.Write.Seconds(), s.Upload.Seconds())
	return b.String()
}
