package wcache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lagc/internal/cachedir"
	"lagc/internal/fixture"
)

func testKey(t *testing.T, v any) Key {
	t.Helper()
	k, err := KeyOf(v)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// noTemps fails if a temporary file was left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if cachedir.IsTemp(e.Name()) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestRoundTrip(t *testing.T) {
	c := Open(t.TempDir())
	for _, n := range []int{0, 1, 4095, 4096, 1 << 20} {
		k := testKey(t, n)
		want := payload(n, 3)
		meta := Meta{Name: "blk.0.ffn_down_exps.weight", DType: "q4_k", Shape: []int{8, 256, n}, Layout: "quant", Source: "x.gguf"}
		if err := c.Put(k, meta, want); err != nil {
			t.Fatal(err)
		}
		e, err := c.Get(k)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(e.Data, want) {
			t.Errorf("%d bytes: payload differs", n)
		}
		if e.Meta.Key != string(k) || e.Meta.Name != meta.Name || e.Meta.Layout != "quant" || e.Meta.Created.IsZero() {
			t.Errorf("meta %+v", e.Meta)
		}
		if n > 0 && uintptr(len(e.Data)) > 0 {
			if off := filepathSize(t, c.path(k)) - int64(n); off%pageSize != 0 {
				t.Errorf("payload at %d, not page-aligned", off)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := Verify(c.path(k)); err != nil {
			t.Errorf("Verify: %v", err)
		}
	}
	if _, err := c.Get(testKey(t, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent entry: %v, want fs.ErrNotExist", err)
	}
	noTemps(t, c.Dir())
}

func filepathSize(t *testing.T, p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestDamagedEntries: every kind of damage is detected, the entry removed
// (never used), and a rebuilt entry is read back.
func TestDamagedEntries(t *testing.T) {
	want := payload(10000, 9)
	cases := []struct {
		name   string
		damage func(t *testing.T, c *Cache, k Key)
	}{
		{"payload bit flip", func(t *testing.T, c *Cache, k Key) { fixture.FlipBit(t, c.path(k), -100) }},
		{"metadata bit flip", func(t *testing.T, c *Cache, k Key) { fixture.FlipBit(t, c.path(k), fixedHead+3) }},
		{"length field", func(t *testing.T, c *Cache, k Key) { fixture.FlipBit(t, c.path(k), 24) }},
		{"truncated payload", func(t *testing.T, c *Cache, k Key) { truncate(t, c.path(k), -1) }},
		{"truncated header", func(t *testing.T, c *Cache, k Key) { truncate(t, c.path(k), 40) }},
		{"empty", func(t *testing.T, c *Cache, k Key) { truncate(t, c.path(k), 0) }},
		{"extended", func(t *testing.T, c *Cache, k Key) { appendBytes(t, c.path(k), []byte{0}) }},
		{"foreign file", func(t *testing.T, c *Cache, k Key) {
			if err := os.WriteFile(c.path(k), []byte("GGUF not a cache entry at all, but long enough to have a header.............."), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"another key's entry", func(t *testing.T, c *Cache, k Key) {
			other := testKey(t, "other")
			if err := c.Put(other, Meta{Name: "other"}, payload(10000, 1)); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(c.path(other), c.path(k)); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, c *Cache, k Key) {
			os.Remove(c.path(k))
			if err := os.Mkdir(c.path(k), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"named pipe", func(t *testing.T, c *Cache, k Key) {
			os.Remove(c.path(k))
			fixture.FIFO(t, c.path(k))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Open(t.TempDir())
			k := testKey(t, tc.name)
			if err := c.Put(k, Meta{Name: "w"}, want); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, c, k)
			if tc.name != "directory" && tc.name != "named pipe" {
				if err := Verify(c.path(k)); !errors.Is(err, ErrCorrupt) {
					t.Errorf("Verify: %v, want ErrCorrupt", err)
				}
			}
			done := make(chan error, 1)
			go func() {
				e, err := c.Get(k)
				if err == nil {
					e.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Get: %v, want ErrCorrupt", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Get blocked")
			}
			if tc.name != "directory" {
				if _, err := os.Lstat(c.path(k)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the damaged entry was kept: %v", err)
				}
			} else {
				os.Remove(c.path(k))
			}
			if err := c.Put(k, Meta{Name: "w"}, want); err != nil {
				t.Fatal(err)
			}
			e, err := c.Get(k)
			if err != nil {
				t.Fatalf("rebuilt entry: %v", err)
			}
			defer e.Close()
			if !bytes.Equal(e.Data, want) {
				t.Error("rebuilt entry differs")
			}
		})
	}
}

func truncate(t *testing.T, p string, n int64) {
	t.Helper()
	if n < 0 {
		n += filepathSize(t, p)
	}
	if err := os.Truncate(p, n); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, p string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	f.Close()
}

// TestPutFailureLeavesNothing: a write that fails leaves neither an entry
// nor a temporary file, and an older entry of the key stays whole.
func TestPutFailureLeavesNothing(t *testing.T) {
	c := Open(t.TempDir())
	k := testKey(t, 1)
	huge := Meta{Name: strings.Repeat("x", maxMeta)}
	if err := c.Put(k, huge, payload(100, 0)); err == nil {
		t.Fatal("metadata past the limit accepted")
	}
	if _, err := os.Lstat(c.path(k)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed write left an entry: %v", err)
	}
	noTemps(t, c.Dir())
	old := payload(100, 5)
	if err := c.Put(k, Meta{Name: "old"}, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(k, huge, payload(100, 6)); err == nil {
		t.Fatal("metadata past the limit accepted")
	}
	e, err := c.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !bytes.Equal(e.Data, old) || e.Meta.Name != "old" {
		t.Error("a failed write changed the previous entry")
	}
	noTemps(t, c.Dir())
	if err := c.Put("../escape", Meta{}, nil); err == nil {
		t.Error("a malformed key was accepted")
	}
}

func TestListTrim(t *testing.T) {
	c := Open(t.TempDir())
	if l, err := c.List(); err != nil || len(l) != 0 {
		t.Fatalf("missing directory: %v, %v", l, err)
	}
	base := time.Now().Add(-time.Hour)
	var keys []Key
	for i := 0; i < 4; i++ {
		k := testKey(t, i)
		keys = append(keys, k)
		if err := c.Put(k, Meta{Name: string(rune('a' + i))}, payload(5000, byte(i))); err != nil {
			t.Fatal(err)
		}
		// entry i last used i minutes after base; entry 0 the longest ago
		u := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(c.path(k), u, u); err != nil {
			t.Fatal(err)
		}
	}
	// A hit makes entry 0 the most recently used.
	e, err := c.Get(keys[0])
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := os.WriteFile(filepath.Join(c.Dir(), "junk"+EntrySuffix), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var total int64
	for _, in := range l {
		if in.Err != nil {
			names = append(names, "damaged")
			if !errors.Is(in.Err, ErrCorrupt) {
				t.Errorf("junk entry: %v", in.Err)
			}
			os.Remove(in.Path)
			continue
		}
		names = append(names, in.Meta.Name)
		total += in.Size
	}
	// the junk file is the newest written
	if got := strings.Join(names, ","); got != "b,c,d,a,damaged" && got != "b,c,d,damaged,a" {
		t.Errorf("least recently used first: %s", got)
	}
	per := total / 4
	// Keep two entries' worth: b and c go (least recently used).
	removed, over, err := c.Trim(2*per, time.Now().Add(time.Hour))
	if err != nil || removed != 2*per || over != 0 {
		t.Fatalf("Trim: removed %d, over %d, %v", removed, over, err)
	}
	l, _ = c.List()
	if len(l) != 2 || l[0].Meta.Name != "d" || l[1].Meta.Name != "a" {
		t.Errorf("after Trim: %+v", l)
	}
	// Entries used since keep are spared even above the limit.
	removed, over, err = c.Trim(0, base.Add(-time.Hour))
	if err != nil || removed != 0 || over != 2*per {
		t.Errorf("Trim sparing: removed %d, over %d, %v", removed, over, err)
	}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1234", 1234, true}, {"4K", 4096, true}, {"1.5M", 3 << 19, true},
		{"200G", 200 << 30, true}, {"2GiB", 2 << 30, true}, {"1t", 1 << 40, true}, {" 3 GB ", 3 << 30, true},
		{"", 0, false}, {"-1G", 0, false}, {"G", 0, false}, {"12X", 0, false}, {"NaN", 0, false}, {"1e30T", 0, false},
	} {
		got, err := ParseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}
