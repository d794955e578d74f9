package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"lagc/exec/gpu"
	"lagc/internal/stopseq"
)

// TestVersion: `lagc version` and `lagc --version` name the build, the Go
// toolchain and the CUDA libraries, cuBLASLt included (or why they are
// not found).
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errs := runBinary(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := []string{"lagc ", "commit: ", "go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, "CUDA driver: ", "NVRTC: ", "cuBLASLt (optional): "}
		if len(lines) != len(want) {
			t.Fatalf("%v printed %d lines, want %d:\n%s", args, len(lines), len(want), out)
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%v line %d is %q, want it to start with %q", args, i+1, lines[i], w)
			}
		}
		if short, _ := gpuUnavailable(); short != "" && !strings.Contains(out, "not found: ") {
			t.Errorf("no GPU here (%s), but version does not say what was not found:\n%s", short, out)
		}
	}
}

// TestRunPromptFile: --prompt-file reads a file or stdin (-) and gives the
// same tokens as --prompt; it prints only the continuation, where --prompt
// echoes the prompt first.
func TestRunPromptFile(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	const text = "func main() {"
	file := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "-n", "8", "--device", "cpu", "--json"}
	_, want, _ := runCapture(t, append(args, "--prompt", text)...)
	if code, got, errs := runCapture(t, append(args, "--prompt-file", file)...); code != 0 || got != want {
		t.Fatalf("--prompt-file: exit %d (%s)\n got %s\nwant %s", code, errs, got, want)
	}
	if code, got, errs := runBinary(t, text, append(args, "--prompt-file", "-")...); code != 0 || got != want {
		t.Fatalf("--prompt-file - (stdin): exit %d (%s)\n got %s\nwant %s", code, errs, got, want)
	}
	_, echoed, _ := runCapture(t, "run", "-n", "8", "--device", "cpu", "--prompt", text)
	_, plain, _ := runCapture(t, "run", "-n", "8", "--device", "cpu", "--prompt-file", file)
	if echoed != text+plain || plain == "" {
		t.Fatalf("--prompt printed %q; --prompt-file %q; want the prompt, then the same continuation", echoed, plain)
	}
	if code, _, errs := runBinary(t, "", "run", "--device", "cpu", "--prompt-file", "-"); code != 1 || !strings.Contains(errs, "--prompt-file: stdin is empty") {
		t.Fatalf("empty stdin: exit %d, %q", code, errs)
	}
}

// TestRunPromptTooLong: a 300 kB prompt (too long for argv) goes through
// --prompt-file; longer than the context, it is refused before anything is
// printed, with its length in tokens and bytes.
func TestRunPromptTooLong(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	src := mustRead(t, "run.go")
	long := strings.Repeat(src, 300000/len(src)+1)[:300000]
	file := filepath.Join(t.TempDir(), "long.txt")
	if err := os.WriteFile(file, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runBinary(t, "", "run", "--device", "cpu", "--prompt-file", file)
	if code != 1 || out != "" || !strings.Contains(errs, "tokens (300000 bytes), longer than the context of 4096 tokens (--ctx)") {
		t.Fatalf("exit %d, stdout %d bytes, stderr %q", code, len(out), errs)
	}
}

// TestRunStop: generation ends where the text first contains a --stop
// string, which is not printed; the JSON text ends before it too.
func TestRunStop(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	args := []string{"run", "--prompt", "func main() {", "-n", "24", "--device", "cpu"}
	_, full, _ := runCapture(t, append(args, "--json")...)
	var all struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"generated_ids"`
	}
	if err := json.Unmarshal([]byte(full), &all); err != nil {
		t.Fatal(err)
	}
	const stop = "The Go"
	before, _, ok := strings.Cut(all.Text, stop)
	if !ok {
		t.Fatalf("the greedy continuation %q lacks %q: pick another stop string", all.Text, stop)
	}
	_, js, _ := runCapture(t, append(args, "--json", "--stop", "Gopher", "--stop", stop)...)
	var got struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"generated_ids"`
		Stop string  `json:"stop_reason"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	if got.Text != before || got.Stop != "stop" || len(got.IDs) >= len(all.IDs) {
		t.Fatalf("with --stop %q: text %q, stop %q, %d ids; want %q, stop, fewer than %d", stop, got.Text, got.Stop, len(got.IDs), before, len(all.IDs))
	}
	code, text, _ := runCapture(t, append(args, "--stop", stop)...)
	if code != 0 || text != "func main() {"+before+"\n" {
		t.Fatalf("text mode with --stop: exit %d, %q", code, text)
	}
}

func TestStopFilter(t *testing.T) {
	for _, c := range []struct {
		name   string
		stops  []string
		chunks []string
		want   string // printed, with | where the filter reported the stop
	}{
		{"no stops", nil, []string{"ab", "c"}, "abc"},
		{"whole", []string{"END"}, []string{"abEND", "more"}, "ab|"},
		{"split over chunks", []string{"END"}, []string{"abE", "N", "Dx"}, "ab|"},
		{"false start released", []string{"END"}, []string{"abEN", "x"}, "abENx"},
		{"prefix kept to the end", []string{"END"}, []string{"abEN"}, "abEN"},
		{"earliest of several", []string{"zz", "b"}, []string{"abzz"}, "a|"},
		{"multibyte", []string{"é!"}, []string{"café", "!"}, "caf|"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := stopseq.New(c.stops)
			var got strings.Builder
			for _, ch := range c.chunks {
				s, stop := f.Add(ch)
				got.WriteString(s)
				if stop {
					got.WriteString("|")
					break
				}
			}
			if !f.Stopped() {
				got.WriteString(f.Flush())
			}
			if got.String() != c.want {
				t.Fatalf("got %q, want %q", got.String(), c.want)
			}
		})
	}
}

// TestRunNotices: the load line names the bundled model, not a cache path;
// falling back to the CPU is one short line (details with --verbose);
// --ctx beyond the trained length warns; --dtype on the CPU is noted.
func TestRunNotices(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("LAGC_CACHE_DIR", cache)
	code, _, errs := runCapture(t, "run", "--prompt", "x", "-n", "1", "--ctx", "5000", "--dtype", "bf16")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "loaded bundled model on ") || strings.Contains(errs, cache) {
		t.Errorf("the load line does not say \"bundled model\" or shows the cache path:\n%s", errs)
	}
	if !strings.Contains(errs, "warning: --ctx 5000 is beyond the model's max_position_embeddings 4096") {
		t.Errorf("no warning for --ctx beyond max_position_embeddings:\n%s", errs)
	}
	short, detail := gpuUnavailable()
	if short == "" {
		t.Skip("a GPU is available here: no CPU fallback notice to check")
	}
	if !strings.Contains(errs, "note: --dtype bf16 is for the GPU") {
		t.Errorf("no note for --dtype on the CPU:\n%s", errs)
	}
	want := "running on the CPU: " + short + " (--verbose for details)\n"
	if strings.Count(errs, "running on the CPU") != 1 || !strings.Contains(errs, want) {
		t.Errorf("CPU fallback notice: want the one line %q in\n%s", want, errs)
	}
	_, _, verbose := runCapture(t, "run", "--prompt", "x", "-n", "1", "--verbose")
	if !strings.Contains(verbose, "running on the CPU: "+detail+"\n") {
		t.Errorf("--verbose does not give the details %q:\n%s", detail, verbose)
	}
}

// TestBenchNoGPU: on a machine without CUDA, `lagc bench` (GPU by
// default) says why in one line and points at the CPU executor's bench.
func TestBenchNoGPU(t *testing.T) {
	if short, _ := gpuUnavailable(); short == "" {
		t.Skip("a GPU is available here: bench would run")
	}
	code, _, errs := runCapture(t, "bench", "--preset", "synthetic-tiny", "--synthetic")
	if code != 1 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "lagc bench --device cpu times the CPU reference executor") {
		t.Errorf("exit %d, stderr %q: want one line naming --device cpu", code, errs)
	}
}

// TestRunUnwritableCache: where the cache cannot be written, `lagc run`
// reads the bundled model from memory and generates the same tokens.
func TestRunUnwritableCache(t *testing.T) {
	args := []string{"run", "--prompt", "func main() {", "-n", "8", "--device", "cpu", "--json"}
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	_, want, _ := runCapture(t, args...)
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LAGC_CACHE_DIR", file) // a file: no directory can be made below it, not even by root
	code, got, errs := runCapture(t, append(args, "--verbose")...)
	if code != 0 || got != want {
		t.Fatalf("exit %d (%s)\n got %s\nwant %s", code, errs, got, want)
	}
	if !strings.Contains(errs, "reading the bundled model from memory: ") || !strings.Contains(errs, "loaded bundled model") {
		t.Fatalf("stderr does not say the model came from memory:\n%s", errs)
	}
}

// TestRunInterruptDuringPrefill: Ctrl-C while a long prompt is prefilled
// ends the run as Ctrl-C during decoding does: exit 0, saying how far
// prefill got.
func TestRunInterruptDuringPrefill(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	src := mustRead(t, "run.go")
	file := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(file, []byte(src[:9000]), 0o644); err != nil { // about 3500 tokens
		t.Fatal(err)
	}
	p := startLagc(t, "run", "--device", "cpu", "--prompt-file", file, "-n", "4")
	// Interrupt once the model is loaded (the line is printed after the
	// interrupt handler is installed); prefill of the prompt takes seconds.
	p.waitFor(t, "loaded ", 1)
	time.Sleep(50 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("lagc exited with %v after Ctrl-C during prefill:\n%s", err, p.log.String())
	}
	if log := p.log.String(); !strings.Contains(log, "prefill: stopped after ") || !strings.Contains(log, "stop: canceled") {
		t.Fatalf("stderr does not say prefill was stopped:\n%s", log)
	}
}

// TestPlanWarnsCopies: over --gpu-mem, a quantised checkpoint's plan
// (bf16 weight copies for prefill by default) counts the copies and says
// lagc run leaves them out where they do not fit; LAGC_PREFILL_BF16=0
// plans none, so neither appears.
func TestPlanWarnsCopies(t *testing.T) {
	for _, c := range []struct {
		env  string
		note bool
	}{{"", true}, {"0", false}} {
		t.Setenv(gpu.EnvPrefillBF16, c.env)
		_, errs, code := runLagc(t, "plan", "--model", "../../testdata/quant/q4_k_m.gguf", "--gpu-mem", "0.00001")
		copies := strings.Contains(errs, "bf16 weight copies ")
		note := strings.Contains(errs, "leaves the bf16 weight copies out where they do not fit")
		if code != 0 || !strings.Contains(errs, "warning: the plan needs ") || copies != c.note || note != c.note {
			t.Errorf("%s=%q: exit %d, stderr %q; want the copies counted and the note: %v", gpu.EnvPrefillBF16, c.env, code, errs, c.note)
		}
	}
}

// TestPlanWarnsGPUMemory: `lagc plan` warns on stderr when weights, KV
// caches and activations exceed the target GPU's memory (--gpu-mem).
func TestPlanWarnsGPUMemory(t *testing.T) {
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--preset", "laguna-s-2.1", "--ctx", "4096"}, true}, // 219 GiB of bf16 weights
		{[]string{"--preset", "synthetic-tiny"}, false},
		{[]string{"--preset", "synthetic-tiny", "--gpu-mem", "0.00001"}, true}, // 10 KiB
		{[]string{"--preset", "synthetic-tiny", "--gpu-mem", "0"}, false},
	} {
		_, errs, code := runLagc(t, append([]string{"plan"}, c.args...)...)
		warned := strings.Contains(errs, "warning: the plan needs ") && strings.Contains(errs, "of --gpu-mem")
		if code != 0 || warned != c.warn {
			t.Errorf("plan %v: exit %d, stderr %q; want a warning: %v", c.args, code, errs, c.warn)
		}
	}
}
