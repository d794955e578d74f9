package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
)

// TestKVStoreGPU checks where KVAppend and KVCompactRing put each token:
// slot p (linear) or p % window (ring), every other slot untouched, from
// strided (fused QKV) rows. Attention tests check the same cache against
// exec/cpu.KVCache through its results.
func TestKVStoreGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		name                  string
		nkv, d, window, slots int
		p0, T                 int
		compact               bool
	}{
		{"linear", 2, 16, 0, 50, 3, 7, false},
		{"linear-d128", 8, 128, 0, 40, 0, 33, false},
		{"ring-wrap", 2, 16, 8, 8, 6, 5, false},
		{"ring-one", 1, 40, 5, 5, 17, 1, false},
		{"compact-long", 2, 16, 8, 8, 10, 21, true},
		{"compact-short", 8, 128, 16, 16, 30, 5, true},
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				row := c.nkv * c.d
				ld := 3*row + 5
				initK := roundTo(dt, randF32(r, c.slots*row, 1))
				initV := roundTo(dt, randF32(r, c.slots*row, 1))
				src := roundTo(dt, randF32(r, c.T*ld, 1))
				pos := make([]int32, c.T)
				for i := range pos {
					pos[i] = int32(c.p0 + i)
				}
				cache := NewKVLayer(upload(t, k, s, dt, initK), upload(t, k, s, dt, initV), c.nkv, c.d, c.window, c.slots)
				dsrc := upload(t, k, s, dt, src)
				kp, vp := dsrc.Add(int64(row*dt.Size())), dsrc.Add(int64(2*row*dt.Size()))
				var err error
				if c.compact {
					err = k.KVCompactRing(s, dt, cache, kp, vp, ld, uploadI32(t, k, s, pos), c.T)
				} else {
					err = k.KVAppend(s, dt, cache, kp, vp, ld, uploadI32(t, k, s, pos), c.T)
				}
				if err != nil {
					t.Fatal(err)
				}
				wantK := append([]float32(nil), initK...)
				wantV := append([]float32(nil), initV...)
				for tk := 0; tk < c.T; tk++ { // later tokens overwrite earlier ones in a ring
					slot := c.p0 + tk
					if c.window > 0 {
						slot %= c.window
					}
					copy(wantK[slot*row:(slot+1)*row], src[tk*ld+row:])
					copy(wantV[slot*row:(slot+1)*row], src[tk*ld+2*row:])
				}
				checkClose(t, "K", download(t, s, dt, cache.K, len(initK)), wantK, 0)
				checkClose(t, "V", download(t, s, dt, cache.V, len(initV)), wantV, 0)
			})
		}
	}
}

func TestKVLayerBytes(t *testing.T) {
	if got := NewKVLayer(0, 0, 8, 128, 512, 131072).Bytes(cuda.BF16); got != 512*8*128*2 {
		t.Errorf("ring bytes %d", got)
	}
	if got := NewKVLayer(0, 0, 8, 128, 0, 1000).Bytes(cuda.F32); got != 1000*8*128*4 {
		t.Errorf("linear bytes %d", got)
	}
}
