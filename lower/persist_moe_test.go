package lower

import (
	"strings"
	"testing"

	"lagc/ir"
	"lagc/quant"
)

func persistMoETestArgs(qt, dt quant.Type, E, H, I, k int) PersistMoEArgs {
	p := DevicePtr(1 << 20)
	return PersistMoEArgs{H: H, I: I, E: E, TopK: k, XQ: p, Weights: p, IDs: p,
		Gate: QMatrix{W: p, Total: 2 * E * I}, Up: QMatrix{W: p, Total: 2 * E * I, Row0: E * I}, Down: QMatrix{W: p, Total: E * H},
		WType: qt, DownType: dt, Act: p, Out: p, OutType: "bf16", Counters: p, Grid: 132}
}

// TestPersistMoE: the launch at S-2.1's shapes for every type (and q4_k_m's
// q6_k downs) and at TestPersistMoEPairGPU's (gate and up in stacks of
// their own, as that test holds them), its layout, and what it refuses.
func TestPersistMoE(t *testing.T) {
	for _, c := range []struct {
		qt, dt     quant.Type
		E, H, I, k int
		ownStacks  bool // gate and up each a stack of its own, as TestPersistMoEPairGPU holds them
	}{
		{quant.Q4_K, quant.Q4_K, 256, 3072, 1024, 10, false},
		{quant.Q4_K, quant.Q6_K, 256, 3072, 1024, 10, false},
		{quant.Q8_0, quant.Q8_0, 256, 3072, 1024, 10, false},
		{quant.Q5_K, quant.Q5_K, 256, 3072, 1024, 10, false},
		{quant.IQ4_XS, quant.IQ4_XS, 256, 3072, 1024, 10, false},
		{quant.Q6_K, quant.Q6_K, 6, 2048, 512, 4, false},
		{quant.Q4_K, quant.Q4_K, 6, 2048, 512, 4, true},
		{quant.Q4_K, quant.Q4_K, 16, 3072, 1024, 10, true},
		{quant.Q4_K, quant.Q4_K, 6, 512, 1024, 4, true},
		{quant.Q4_K, quant.Q6_K, 6, 2048, 512, 4, true},
		{quant.Q4_K, quant.Q6_K, 16, 3072, 1024, 10, true},
		{quant.Q5_K, quant.Q5_K, 6, 2048, 512, 4, true},
		{quant.IQ4_XS, quant.Q8_0, 6, 2048, 512, 4, true},
		{quant.Q8_0, quant.IQ4_XS, 6, 2048, 512, 4, true},
	} {
		a := persistMoETestArgs(c.qt, c.dt, c.E, c.H, c.I, c.k)
		if c.ownStacks {
			a.Gate, a.Up = QMatrix{W: a.XQ, Total: c.E * c.I}, QMatrix{W: a.XQ, Total: c.E * c.I}
		}
		l, err := PersistMoE(a)
		if err != nil {
			t.Errorf("%s+%s: %v", c.qt, c.dt, err)
			continue
		}
		xoff, slot, ns := PersistMoELayout(a)
		gb, gh := quantRowBytes(c.qt, c.H)
		db, dh := quantRowBytes(c.dt, c.I)
		switch {
		case l.Kernel != "persist_moe_pair" || l.Ints[0] != int64(c.qt) || l.Ints[1] != int64(c.dt):
			t.Errorf("%s+%s: launch %s", c.qt, c.dt, l.NameExpr())
		case xoff < 3*c.H/2+3*c.k*c.I/2 || int64(slot) < 16*(gb+gh) || int64(slot) < int64(8*c.k)*(db+dh) || ns < 2:
			t.Errorf("%s+%s: x and activations %d bytes, %d slots of %d", c.qt, c.dt, xoff, ns, slot)
		case l.Shmem != xoff+ns*slot || l.Shmem > PersistRingShared:
			t.Errorf("%s+%s: %d bytes of shared memory", c.qt, c.dt, l.Shmem)
		}
	}
	a := persistMoETestArgs(quant.Q4_K, quant.Q4_K, 256, 3072, 1024, 10)
	if _, slot, ns := PersistMoELayout(a); slot != 47360 || ns != 4 {
		t.Errorf("S-2.1 q4_k: %d slots of %d bytes, want 4 of 47,360 (80 down rows of 576 bytes and 16 of heads)", ns, slot)
	}
	for _, c := range []struct {
		name string
		edit func(*PersistMoEArgs)
		want string
	}{
		{"k", func(a *PersistMoEArgs) { a.TopK = 65 }, "k 65"},
		{"H", func(a *PersistMoEArgs) { a.H = 3076 }, "q4_k"},
		{"I", func(a *PersistMoEArgs) { a.I = 1000 }, "q4_k"},
		{"out", func(a *PersistMoEArgs) { a.OutType = "f16" }, "output dtype"},
		{"grid", func(a *PersistMoEArgs) { a.Grid = 0 }, "grid of 0"},
		{"act", func(a *PersistMoEArgs) { a.Act = Ptr{} }, "null pointer"},
		{"stack", func(a *PersistMoEArgs) { a.Down.Total = 100 }, "down stack"},
		{"heads off 16 bytes", func(a *PersistMoEArgs) {
			a.DownType = quant.Q6_K
			a.Down.Row0, a.Down.Total = 1, a.E*a.H+1
		}, "8-byte planes from row 1"},
		{"too big", func(a *PersistMoEArgs) { a.TopK = 64 }, "do not fit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := persistMoETestArgs(quant.Q4_K, quant.Q4_K, 256, 3072, 1024, 10)
			c.edit(&a)
			if _, err := PersistMoE(a); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestPersistMoEPlan: with persistMoE enabled, a q4_k_m decode schedule's
// routed pairs (moe_gateup_qgemv_trig, moe_down_qgemv_pre) become one
// persist_moe_pair each, built from their arguments, the rest of the
// stream as it was; the schedule's sync bytes hold its counters; batched
// and prefill schedules keep their launches.
func TestPersistMoEPlan(t *testing.T) {
	o := Options{DType: ir.BF16, Chunk: 64, MaxContext: 256, Seqs: 4}
	base, err := quantPlan(t, "laguna-s-2.1", 3, "q4_k_m", o)
	if err != nil {
		t.Fatal(err)
	}
	o.EnableFusions = []string{persistMoEFusion}
	pm, err := quantPlan(t, "laguna-s-2.1", 3, "q4_k_m", o)
	if err != nil {
		t.Fatal(err)
	}
	flat := func(s *Schedule) (ls []Launch) {
		for _, st := range s.Steps {
			ls = append(ls, st.Launches...)
		}
		return ls
	}
	var want []Launch
	ls := flat(base.Decode)
	pairs := 0
	for i := 0; i < len(ls); i++ {
		if i+1 < len(ls) && ls[i].Kernel == "moe_gateup_qgemv_trig" && ls[i+1].Kernel == "moe_down_qgemv_pre" {
			f, err := PersistMoEPair(ls[i], ls[i+1], base.SMs, Ptr{BaseSync, 0})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, f)
			pairs++
			i++
			continue
		}
		want = append(want, ls[i])
	}
	if pairs != 2 { // 3 layers: the first dense, two MoE
		t.Fatalf("%d routed pairs in the default decode schedule, want 2", pairs)
	}
	got := flat(pm.Decode)
	if len(got) != len(want) {
		t.Fatalf("%d launches, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].NameExpr() != want[i].NameExpr() || got[i].Grid != want[i].Grid || got[i].Shmem != want[i].Shmem || len(got[i].Args) != len(want[i].Args) {
			t.Fatalf("launch %d: %s %v %d, want %s %v %d", i, got[i].NameExpr(), got[i].Grid, got[i].Shmem, want[i].NameExpr(), want[i].Grid, want[i].Shmem)
		}
		for j := range got[i].Args {
			if got[i].Args[j] != want[i].Args[j] {
				t.Fatalf("launch %d (%s) argument %d: %v, want %v", i, got[i].NameExpr(), j, got[i].Args[j], want[i].Args[j])
			}
		}
	}
	if pm.Decode.Sync < PersistMoECounterBytes {
		t.Errorf("decode sync bytes %d, want at least %d", pm.Decode.Sync, PersistMoECounterBytes)
	}
	at, err := pm.At(pm.Decode, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range at {
		for _, l := range s {
			n += b2i(l.Kernel == "persist_moe_pair")
		}
	}
	if n != 2 {
		t.Errorf("Plan.At of the decode schedule: %d persist_moe_pair launches, want 2", n)
	}
	for _, b := range []int{2, 8} {
		all, err := pm.AtBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			for _, l := range s {
				if l.Kernel == "persist_moe_pair" {
					t.Fatalf("a batched step of %d rows has a persist_moe_pair launch", b)
				}
			}
		}
	}
}

// TestPersistMoEBenchForms: BenchmarkPersistMoE's launches_pre, QMoE's
// launches at S-2.1's shapes in DownPre's forms, are ones lower makes.
func TestPersistMoEBenchForms(t *testing.T) {
	p := DevicePtr(1 << 20)
	for _, dt := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		const E, H, I, k = 256, 3072, 1024, 10
		ls, err := QMoE(QMoEArgs{T: 1, H: H, I: I, E: E, TopK: k, X: p, XType: "bf16", Weights: p, IDs: DevicePtr(2 << 20),
			Gate: QMatrix{W: p, Total: 2 * E * I}, Up: QMatrix{W: p, Total: 2 * E * I, Row0: E * I}, Down: QMatrix{W: p, Total: E * H},
			WType: quant.Q4_K, DownType: dt, Out: DevicePtr(3 << 20), OutType: "bf16", Workspace: DevicePtr(4 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := DownPre(ls[1], ls[2]); err != nil {
			t.Errorf("q4_k+%s: %v", dt, err)
		}
	}
}
