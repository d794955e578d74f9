package ir

import (
	"bytes"
	"strings"
	"testing"
)

// layered has three layers reading pos, between an embedding and a head.
const layered = `graph layered
sym T
input %tokens: i32[T]
input %pos: i32[T]
weight @token_embd.weight: f32[16,8]
%e: f32[T,8] = embedding(%tokens, @token_embd.weight)
%eh: f32[T,2,4] = reshape(%e) {shape=[T,2,4]}
%blk.0.r: f32[T,2,4] = rope(%eh, %pos) {rotary_dim=2, theta=10000.0}
%blk.0.out: f32[T,2,4] = add(%blk.0.r, %eh)
%blk.1.r: f32[T,2,4] = rope(%blk.0.out, %pos) {rotary_dim=2, theta=10000.0}
%blk.1.out: f32[T,2,4] = add(%blk.1.r, %blk.0.out)
%blk.2.r: f32[T,2,4] = rope(%blk.1.out, %pos) {rotary_dim=2, theta=10000.0}
%blk.2.out: f32[T,2,4] = add(%blk.2.r, %blk.1.out)
%o: f32[T,8] = reshape(%blk.2.out) {shape=[T,8]}
output %o
`

func TestLayerOf(t *testing.T) {
	for _, c := range []struct {
		name string
		l    int
		ok   bool
	}{{"blk.3.attn_q.weight", 3, true}, {"blk.12.out", 12, true}, {"blk.x.q", 0, false}, {"blk.-1.q", 0, false}, {"blk.3", 0, false}, {"token_embd.weight", 0, false}} {
		if l, ok := LayerOf(c.name); l != c.l || ok != c.ok {
			t.Errorf("LayerOf(%q) = %d, %v; want %d, %v", c.name, l, ok, c.l, c.ok)
		}
	}
}

func TestDOTLayers(t *testing.T) {
	g := mustParse(t, layered)
	for _, c := range []struct {
		name     string
		layers   func(int) bool
		clusters []string
		want     []string // in the drawing
		not      []string // not in it
		edges    int
	}{
		{"all", nil, []string{"cluster_0", "cluster_1", "cluster_2"},
			[]string{"embedding", `label="layer 2"`, "outputs"}, []string{"dashed"}, 16},
		{"middle layer", func(l int) bool { return l == 1 }, []string{"cluster_1"},
			[]string{"%blk.0.out\\nf32[T,2,4]", "style=dashed"}, []string{"embedding", "outputs", "cluster_0", "cluster_2"}, 4},
		{"first layer brings the embedding", func(l int) bool { return l == 0 }, []string{"cluster_0"},
			[]string{"embedding", "%tokens"}, []string{"outputs", "dashed"}, 6},
		{"last layer brings the head", func(l int) bool { return l == 2 }, []string{"cluster_2"},
			[]string{"outputs", "dashed"}, []string{"embedding"}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteDOTWith(&b, g, DOTOptions{Layers: c.layers}); err != nil {
				t.Fatal(err)
			}
			d := b.String()
			if n := strings.Count(d, "subgraph "); n != len(c.clusters) {
				t.Errorf("%d clusters, want %v", n, c.clusters)
			}
			for _, s := range c.clusters {
				if !strings.Contains(d, "subgraph "+s+" {") {
					t.Errorf("no subgraph %s", s)
				}
			}
			for _, s := range c.want {
				if !strings.Contains(d, s) {
					t.Errorf("lacks %q", s)
				}
			}
			for _, s := range c.not {
				if strings.Contains(d, s) {
					t.Errorf("has %q", s)
				}
			}
			if n := strings.Count(d, "->"); n != c.edges {
				t.Errorf("%d edges, want %d", n, c.edges)
			}
			// pos is drawn in each layer that reads it: its edges stay inside.
			if n, want := strings.Count(d, "label=\"%pos\\ni32[T]\""), len(c.clusters); n != want {
				t.Errorf("pos drawn %d times, want once per layer (%d)\n%s", n, want, d)
			}
		})
	}
}
