package ckpt_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lagc/ckpt"
)

var updateHostile = flag.Bool("update-hostile", false, "rewrite the GGUF files of testdata/hostile/ckpt that this package's tests make")

const hostileCkptDir = "../testdata/hostile/ckpt"

// hostileGGUF builds the tiny GGUF of the tests with kv values replaced and
// tensors edited.
func hostileGGUF(t *testing.T, set map[string]any, edit func([]ckpt.GGUFTensor)) []byte {
	t.Helper()
	kv, ts := tinyGGUF(t)
	for k, v := range set {
		kv = append(drop(kv, k), ckpt.KV{Key: k, Value: v})
	}
	if edit != nil {
		edit(ts)
	}
	var b bytes.Buffer
	if err := ckpt.EncodeGGUF(&b, kv, ts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// setF32 stores x as element i of an f32 tensor.
func setF32(ts []ckpt.GGUFTensor, name string, i int, x float32) {
	for k := range ts {
		if ts[k].Name == name {
			if ts[k].DType != ckpt.F32 {
				panic("setF32: " + name + " is not f32")
			}
			binary.LittleEndian.PutUint32(ts[k].Data[4*i:], math.Float32bits(x))
		}
	}
}

// TestHostileGGUFFiles keeps the committed files current (-update-hostile
// rewrites them) and checks nan_rms_eps.gguf is refused. nan_weight.gguf
// opens (weights are not scanned) and is run by engine's tests.
func TestHostileGGUFFiles(t *testing.T) {
	nan := float32(math.NaN())
	files := map[string][]byte{
		"nan_rms_eps.gguf": hostileGGUF(t, map[string]any{"laguna.attention.layer_norm_rms_epsilon": nan}, nil),
		"nan_weight.gguf": hostileGGUF(t, nil, func(ts []ckpt.GGUFTensor) {
			setF32(ts, "blk.2.ffn_norm.weight", 3, nan)
		}),
	}
	for name, data := range files {
		path := filepath.Join(hostileCkptDir, name)
		if *updateHostile {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s is stale: run go test ./ckpt -run TestHostileGGUFFiles -update-hostile", path)
		}
	}
	_, err := ckpt.Open(filepath.Join(hostileCkptDir, "nan_rms_eps.gguf"))
	if err == nil || !strings.Contains(err.Error(), "laguna.attention.layer_norm_rms_epsilon = NaN") || !strings.Contains(err.Error(), "want a finite number") {
		t.Errorf("nan_rms_eps.gguf: %v", err)
	}
	ck, err := ckpt.Open(filepath.Join(hostileCkptDir, "nan_weight.gguf"))
	if err != nil {
		t.Fatalf("nan_weight.gguf: %v", err)
	}
	ck.Close()
}

// TestNonFiniteMetadata: every float key read from GGUF metadata must be
// finite, and in range; NaN ones made generation yield token 0 forever.
func TestNonFiniteMetadata(t *testing.T) {
	keys := []string{
		"laguna.attention.layer_norm_rms_epsilon", "laguna.expert_weights_scale", ckpt.KeyRouterSoftcap,
		"laguna.rope.freq_base", "laguna.rope.freq_base_swa", "laguna.rope.scaling.factor",
		"laguna.rope.scaling.yarn_beta_fast", "laguna.rope.scaling.yarn_beta_slow", "laguna.rope.scaling.yarn_attn_factor",
	}
	for _, key := range keys {
		for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			p := filepath.Join(t.TempDir(), "x.gguf")
			if err := os.WriteFile(p, hostileGGUF(t, map[string]any{key: v}, nil), 0o644); err != nil {
				t.Fatal(err)
			}
			ck, err := ckpt.Open(p)
			if err == nil {
				ck.Close()
				t.Errorf("%s = %v accepted", key, v)
				continue
			}
			if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "want a finite number") {
				t.Errorf("%s = %v: %v", key, v, err)
			}
		}
	}
	ranges := []struct {
		key  string
		v    float32
		want string
	}{
		{"laguna.attention.layer_norm_rms_epsilon", 10, "rms_norm_eps = 10: want a number in (0, 1]"},
		{"laguna.expert_weights_scale", 1e30, "moe_routed_scaling_factor = 1e+30: want a number in (0, 1e+06]"},
		{"laguna.expert_weights_scale", -1, "moe_routed_scaling_factor = -1"},
		{ckpt.KeyRouterSoftcap, -5, "moe_router_logit_softcapping = -5"},
		{"laguna.rope.freq_base", 1e20, "rope_theta = 1e+20: want a number in (0, 1e+15]"},
	}
	for _, tc := range ranges {
		p := filepath.Join(t.TempDir(), "x.gguf")
		if err := os.WriteFile(p, hostileGGUF(t, map[string]any{tc.key: tc.v}, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := ckpt.Open(p)
		if err == nil {
			ck.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %g: %v, want %q", tc.key, tc.v, err, tc.want)
		}
	}
}
