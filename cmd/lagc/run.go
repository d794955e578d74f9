package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"lagc/internal/stopseq"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"lagc/engine"
	"lagc/exec/cpu"
	"lagc/exec/gpu"
	"lagc/ir"
	"lagc/lower"
	"lagc/tokenizer"
)

func init() {
	register(&command{
		name:    "run",
		summary: "generate text or token ids with a model (CPU reference or GPU)",
		usage:   "run [--model CKPT] (--prompt TEXT | --prompt-file FILE | --prompt-ids 1,2,3 | --chat) [flags]",
		setup:   setupRun,
		groups: []flagGroup{
			{"Prompt (one of --prompt, --prompt-file, --prompt-ids, --chat)", []string{"prompt", "prompt-file", "prompt-ids", "chat", "system", "raw"}},
			{"Generation", []string{"n", "stop", "temperature", "top-k", "top-p", "min-p", "repeat-penalty", "seed"}},
			{"Model and device", []string{"model", "device", "ctx", "threads", "chunk", "dtype", "weight-cache", "full-prefill"}},
			{"Output", []string{"json", "logits", "logprobs", "verbose", "profile"}},
			{"Graph (for engine development)", []string{"yaml", "passes", "disable-pass"}},
		},
	})
}

type runFlags struct {
	model, prompt, promptFile, promptIDs string
	chat, jsonOut, logits, verbose       bool
	system                               string
	stops                                stringList
	n, chunk, ctx, threads               int
	device, yaml                         string
	dtype, profile                       string
	passes, disable                      string
	temperature, topP, minP              float64
	topK, logprobs                       int
	repeatPenalty                        float64
	seed                                 uint64
	raw, fullPrefill                     bool
	weightCache                          weightCacheFlag
	set                                  map[string]bool // flags given on the command line
}

// runIO lets tests capture the command's streams.
var runIO = struct {
	in       io.Reader
	out, err io.Writer
}{os.Stdin, os.Stdout, os.Stderr}

// cpuChunkTime is how long one prefill step on the CPU may take, so that
// Ctrl-C during a long prefill is noticed within about this time.
const cpuChunkTime = 100 * time.Millisecond

func setupRun(fs *flag.FlagSet) func([]string) error {
	f := &runFlags{}
	fs.StringVar(&f.model, "model", "", "checkpoint: an HF directory or a .gguf file (default: the bundled tiny model)")
	fs.StringVar(&f.prompt, "prompt", "", "prompt text (needs the checkpoint's tokenizer); printed before the continuation")
	fs.StringVar(&f.promptFile, "prompt-file", "", "read the prompt text from this file (- for stdin); only the continuation is printed")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt as comma-separated token ids")
	fs.BoolVar(&f.chat, "chat", false, "interactive conversation using the checkpoint's chat template (/reset, /exit)")
	fs.StringVar(&f.system, "system", "", "with --chat: the system message (default: the template's own)")
	fs.BoolVar(&f.fullPrefill, "full-prefill", false, "GPU: run the last layer's MLP and the LM head on every prompt row, not only the last (the last logits then come from the prefill kernels, not the one-row ones; slower)")
	fs.BoolVar(&f.raw, "raw", false, "with --prompt or --prompt-file: encode the text as is (no bos), as tokenizer.encode(add_special_tokens=False) does")
	fs.IntVar(&f.n, "n", 64, "maximum number of tokens to generate, per turn with --chat")
	fs.Var(&f.stops, "stop", "stop when the generated text contains this string, which is not printed (repeatable)")
	fs.StringVar(&f.device, "device", "auto", "cpu, cuda, or auto (cuda where a GPU is found, else cpu)")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object (prompt_ids, generated_ids, ...) instead of text; one per turn with --chat")
	fs.BoolVar(&f.logits, "logits", false, "with --json: include the prompt's last-position logits as last_logits")
	fs.IntVar(&f.logprobs, "logprobs", -1, "with --json: each generated token's log-probability and the N most likely tokens at its step (0 to 20; -1: off)")
	fs.BoolVar(&f.verbose, "verbose", false, "say why the GPU is not used, where the bundled model comes from, and how --chat reuses its cache")
	fs.IntVar(&f.chunk, "chunk", 0, "prefill chunk size in tokens (0: on a GPU 4096 where --ctx exceeds 2048 and that plan fits, else 2048; on the CPU 2048, with steps also kept short enough for Ctrl-C)")
	fs.StringVar(&f.dtype, "dtype", "bf16", "GPU activations and weights: bf16 or f32 (exact, for testing); the CPU computes in f32")
	fs.StringVar(&f.profile, "profile", "", "GPU: write the GPU time of every kernel (eager launches) to FILE as a pprof profile")
	fs.IntVar(&f.ctx, "ctx", 0, "context length (KV cache size); 0: the model's max_position_embeddings")
	addWeightCacheFlag(fs, &f.weightCache)
	fs.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fs.StringVar(&f.yaml, "yaml", "", "model description (default: the embedded models/laguna.yaml)")
	fs.StringVar(&f.passes, "passes", "", "comma-separated pass pipeline (default: the standard one)")
	fs.StringVar(&f.disable, "disable-pass", "", "comma-separated passes to skip")
	fs.Float64Var(&f.temperature, "temperature", 0, "sampling temperature; 0 is greedy")
	fs.IntVar(&f.topK, "top-k", 0, "keep the k most likely tokens (0: all)")
	fs.Float64Var(&f.topP, "top-p", 1, "nucleus sampling: keep the smallest set with this much probability")
	fs.Float64Var(&f.minP, "min-p", 0, "drop tokens less likely than min-p times the most likely one")
	fs.Float64Var(&f.repeatPenalty, "repeat-penalty", 1, "penalty for tokens already in the context; 1 is none")
	fs.Uint64Var(&f.seed, "seed", 0, "random seed for sampling (0: from the clock)")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		f.set = setFlags(fs)
		return runRun(f)
	}
}

// check refuses contradictory or meaningless flags before anything loads.
func (f *runFlags) check() error {
	var given []string
	for _, name := range []string{"prompt", "prompt-file", "prompt-ids", "chat"} {
		if f.set[name] && (name != "chat" || f.chat) {
			given = append(given, "--"+name)
		}
	}
	usage := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	switch {
	case len(given) == 0:
		return usage("give one of --prompt, --prompt-file, --prompt-ids or --chat")
	case len(given) > 1:
		return usage("give only one of --prompt, --prompt-file, --prompt-ids or --chat, not %s", strings.Join(given, " and "))
	case f.set["prompt"] && f.prompt == "":
		return usage("--prompt is empty: give the text to continue")
	case f.set["prompt-file"] && f.promptFile == "":
		return usage("--prompt-file is empty: give a file name, or - for stdin")
	case f.set["system"] && !f.chat:
		return usage("--system goes with --chat")
	case f.raw && f.prompt == "" && f.promptFile == "":
		return usage("--raw goes with --prompt or --prompt-file")
	case f.logits && !f.jsonOut:
		return usage("--logits goes with --json")
	case f.logprobs >= 0 && !f.jsonOut:
		return usage("--logprobs goes with --json")
	case f.logprobs >= 0 && f.chat:
		return usage("--logprobs goes with a single prompt, not --chat")
	case f.logprobs < -1 || f.logprobs > 20:
		return usage("--logprobs %d: expected 0 to 20 alternatives (or -1: off)", f.logprobs)
	case f.logits && f.chat:
		return usage("--logits goes with a single prompt, not --chat")
	case f.n < 0:
		return usage("-n %d: expected 0 or more tokens", f.n)
	case f.chunk < 0:
		return usage("--chunk %d: expected a positive number of tokens (or 0: the default)", f.chunk)
	case f.ctx < 0:
		return usage("--ctx %d: expected 0 (the model's length) or more tokens", f.ctx)
	case f.threads < 0:
		return usage("--threads %d: expected 0 (all cores) or more", f.threads)
	case f.temperature < 0:
		return usage("--temperature %g: expected 0 (greedy) or more", f.temperature)
	}
	for _, s := range f.stops {
		if s == "" {
			return usage("--stop is empty: give the string that ends generation")
		}
	}
	if dt, err := ir.ParseDType(f.dtype); err != nil || (dt != ir.BF16 && dt != ir.F32) {
		return usage("--dtype %q: expected bf16 or f32", f.dtype)
	}
	return checkPassNames(f.passes, f.disable)
}

func runRun(f *runFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	var ids []int32
	if f.promptIDs != "" {
		var err error
		if ids, err = parseIDs(f.promptIDs); err != nil {
			return fmt.Errorf("%w: --prompt-ids: %v", errUsage, err)
		}
	}
	if f.threads > 0 {
		cpu.SetMaxThreads(f.threads)
	}
	sampler, err := runSampler(f)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var lp *cpu.LogprobSampler
	if f.logprobs >= 0 {
		if sampler == nil { // the logits are needed: a greedy sampler, not the backend's argmax
			sampler, _ = cpu.NewSampler(cpu.SamplerConfig{})
		}
		lp = &cpu.LogprobSampler{Inner: sampler, Top: f.logprobs}
		sampler = lp
	}
	device, err := pickDevice(f.device, f.verbose)
	if err != nil {
		return err
	}
	if f.profile != "" && device != "cuda" {
		return fmt.Errorf("%w: --profile times GPU kernels: it needs --device cuda", errUsage)
	}
	text := f.prompt
	if f.promptFile != "" {
		if text, err = readPromptFile(f.promptFile); err != nil {
			return err
		}
	}
	t0 := time.Now()
	ck, name, err := openModelCheckpoint(f.model, f.verbose)
	if err != nil {
		return err
	}
	m, err := engine.OpenCheckpoint(ck, engine.Options{Device: device, YAMLPath: f.yaml, Passes: splitList(f.passes),
		Disable: splitList(f.disable), MaxContext: f.ctx, Progress: runIO.err,
		DType: f.dtype, Chunk: f.chunk, AutoChunk: f.chunk == 0, Profile: f.profile != "", NoWeightCache: f.weightCache.off, CacheQuantised: f.weightCache.all})
	if err != nil {
		return err
	}
	defer m.Close()
	// From here Ctrl-C stops prefill or generation cleanly and keeps what
	// was produced.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Fprintf(runIO.err, "loaded %s on %s in %.2fs (%d layers, hidden %d, vocab %d)\n", name, m.Device,
		time.Since(t0).Seconds(), m.Config.NumLayers, m.Config.HiddenSize, m.Config.VocabSize)
	warnSkipKernels(runIO.err, m.Device)
	if trained := m.Config.MaxPositionEmbeddings; f.ctx > trained {
		fmt.Fprintf(runIO.err, "warning: --ctx %d is beyond the model's max_position_embeddings %d: positions past it were never trained\n", f.ctx, trained)
	}
	if f.set["dtype"] && f.dtype != "f32" && m.Device == "cpu" {
		fmt.Fprintf(runIO.err, "note: --dtype %s is for the GPU; the CPU reference computes in f32\n", f.dtype)
	}

	var tok *tokenizer.Tokenizer
	if ids == nil || len(f.stops) > 0 {
		if tok, err = engine.LoadTokenizer(m.Checkpoint); err != nil {
			return fmt.Errorf("--prompt, --prompt-file, --chat and --stop need a tokenizer: %w", err)
		}
	}
	if lp != nil && tok == nil {
		tok, _ = engine.LoadTokenizer(m.Checkpoint) // token texts if it has one; ids alone if not
	}
	// The engine's steps are the plan's (Ctrl-C is checked between them).
	chunk := f.chunk
	if chunk == 0 {
		if chunk = m.PrefillChunk(); chunk == 0 {
			chunk = lower.DefaultChunk
		}
	}
	gen := engine.GenOptions{MaxTokens: f.n, Sampler: sampler, Chunk: chunk, LastOnly: !f.fullPrefill}
	if m.Device == "cpu" {
		gen.ChunkTime = cpuChunkTime
	}
	if f.chat {
		stop() // the chat handles Ctrl-C per turn
		return runChat(m, tok, gen, f)
	}
	if ids == nil {
		if ids, err = tok.EncodeContext(ctx, text, !f.raw); err != nil {
			if errors.Is(err, context.Canceled) { // Ctrl-C before prefill began: a stop like one during it
				fmt.Fprintf(runIO.err, "prefill: stopped after 0 tokens (while encoding the prompt); stop: canceled\n")
				return nil
			}
			return fmt.Errorf("encoding the prompt: %w", err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("the prompt encodes to no tokens")
		}
	}
	if max := m.Backend.MaxPos(); len(ids) > max {
		if f.promptIDs != "" {
			return fmt.Errorf("the prompt is %d tokens, longer than the context of %d tokens (--ctx)", len(ids), max)
		}
		return fmt.Errorf("the prompt is %d tokens (%d bytes), longer than the context of %d tokens (--ctx)", len(ids), len(text), max)
	}
	if f.promptIDs == "" {
		gen.Stop = tok.IsEOG
	} else if eos := m.Config.EOSTokenIDs; len(eos) > 0 && !f.jsonOut {
		gen.Stop = func(id int32) bool { return containsID(eos, id) }
	}
	out := newTokenOutput(tok, f.stops, !f.jsonOut && f.promptIDs == "", f.jsonOut)
	gen.OnToken = out.add
	if f.prompt != "" && !f.jsonOut {
		fmt.Fprint(runIO.out, f.prompt)
	}
	res, err := m.Generate(ctx, ids, gen)
	if err != nil {
		return err
	}
	if f.profile != "" {
		if err := writeProfile(m, f.profile); err != nil {
			return err
		}
	}
	out.finish()
	reportSpeed(res)
	if f.jsonOut {
		return writeRunJSON(res, out, f.logits, lp, tok)
	}
	return nil
}

// runSampler returns the sampler of the flags, or nil for plain greedy
// decoding (temperature 0, no repetition penalty): the engine then takes
// the backend's argmax, which on the GPU copies no logits and decodes one
// step ahead; a sampler, even a greedy one, gets every step's row.
func runSampler(f *runFlags) (engine.Sampler, error) {
	s, err := cpu.NewSampler(cpu.SamplerConfig{Temperature: f.temperature, TopK: f.topK, TopP: f.topP,
		MinP: f.minP, RepetitionPenalty: f.repeatPenalty, Seed: seedOrClock(f.seed)})
	if err != nil || s.Argmax() {
		return nil, err
	}
	return s, nil
}

// readPromptFile reads --prompt-file: a file, or stdin for "-".
func readPromptFile(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(runIO.in)
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return "", fmt.Errorf("--prompt-file: %w", err)
	}
	if len(b) == 0 {
		if name == "-" {
			name = "stdin"
		}
		return "", fmt.Errorf("--prompt-file: %s is empty", name)
	}
	return string(b), nil
}

// tokenOutput streams generated tokens: as text (with a tokenizer) or as
// ids, holding back text that may start a stop string; with a stop string
// complete it ends generation (engine.ErrStop).
type tokenOutput struct {
	tok    *tokenizer.Tokenizer
	stream *tokenizer.StreamDecoder
	stops  *stopseq.Matcher
	asText bool // print text rather than ids
	quiet  bool // print nothing (--json)
	text   strings.Builder
}

func newTokenOutput(tok *tokenizer.Tokenizer, stops []string, asText, quiet bool) *tokenOutput {
	o := &tokenOutput{tok: tok, asText: asText && tok != nil, quiet: quiet, stops: stopseq.New(stops)}
	if tok != nil {
		o.stream = tok.NewStreamDecoder(true)
	}
	return o
}

func (o *tokenOutput) add(id int32) error {
	if !o.quiet && !o.asText {
		if _, err := fmt.Fprintf(runIO.out, "%d ", id); err != nil {
			return err
		}
	}
	if o.stream == nil {
		return nil
	}
	s, stopped := o.stops.Add(o.stream.Add(id))
	o.text.WriteString(s)
	if !o.quiet && o.asText {
		if _, err := io.WriteString(runIO.out, s); err != nil {
			return err
		}
	}
	if stopped {
		return engine.ErrStop
	}
	return nil
}

// finish prints what was held back and ends the line.
func (o *tokenOutput) finish() {
	var s string
	if o.stream != nil && !o.stops.Stopped() {
		s, _ = o.stops.Add(o.stream.Flush())
		s += o.stops.Flush()
		o.text.WriteString(s)
	}
	if !o.quiet {
		if !o.asText {
			s = ""
		}
		fmt.Fprintln(runIO.out, s)
	}
}

// pickDevice resolves --device; auto falls back to the CPU with one short
// line on stderr (the details with verbose).
func pickDevice(want string, verbose bool) (string, error) {
	switch want {
	case "cpu":
		return "cpu", nil
	case "cuda":
		return "cuda", nil
	case "auto", "":
		if short, detail := gpuUnavailable(); short != "" {
			if verbose {
				fmt.Fprintf(runIO.err, "running on the CPU: %s\n", detail)
			} else {
				fmt.Fprintf(runIO.err, "running on the CPU: %s (--verbose for details)\n", short)
			}
			return "cpu", nil
		}
		return "cuda", nil
	}
	return "", fmt.Errorf("%w: --device %q: expected cpu, cuda or auto", errUsage, want)
}

func reportSpeed(res *engine.GenResult) {
	cached := ""
	if res.Start > 0 {
		cached = fmt.Sprintf(" (after %d cached)", res.Start)
	}
	if res.Fed < len(res.Prompt) {
		fmt.Fprintf(runIO.err, "prefill: stopped after %d of %d tokens%s; stop: %s\n", res.Fed, len(res.Prompt), cached, res.StopReason)
		return
	}
	dec := 0.0
	if n := len(res.Generated) - 1; n > 0 && res.DecodeTime > 0 {
		dec = float64(n) / res.DecodeTime.Seconds()
	}
	fmt.Fprintf(runIO.err, "prefill: %d tokens%s, %.1f tok/s; decode: %d tokens, %.1f tok/s; stop: %s\n",
		res.Fed, cached, float64(res.Fed)/res.PrefillTime.Seconds(), len(res.Generated), dec, res.StopReason)
}

func writeRunJSON(res *engine.GenResult, out *tokenOutput, logits bool, lp *cpu.LogprobSampler, tok *tokenizer.Tokenizer) error {
	obj := map[string]any{
		"prompt_ids":    nonNil(res.Prompt),
		"generated_ids": nonNil(res.Generated),
		"stop_reason":   res.StopReason,
	}
	if out.stream != nil {
		obj["text"] = out.text.String()
	}
	if logits {
		obj["last_logits"] = res.LastLogits
	}
	if lp != nil {
		obj["logprobs"] = runLogprobs(lp.Records(), tok)
	}
	return json.NewEncoder(runIO.out).Encode(obj)
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// writeProfile writes the backend's kernel timings as a pprof profile.
func writeProfile(m *engine.Model, path string) error {
	p, ok := m.Backend.(interface{ WriteProfile(io.Writer) error })
	if !ok {
		return fmt.Errorf("--profile: the %s backend does not profile", m.Device)
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	if err := p.WriteProfile(out); err != nil {
		out.Close()
		return fmt.Errorf("--profile: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	fmt.Fprintf(runIO.err, "profile written to %s (go tool pprof -top %s)\n", path, path)
	return nil
}

// parseIDs parses --prompt-ids: comma-separated token ids, none empty.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for i, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("id %d of %q is empty", i+1, s)
		}
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a token id", p)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

func containsID(ids []int, id int32) bool {
	for _, x := range ids {
		if int32(x) == id {
			return true
		}
	}
	return false
}

func seedOrClock(seed uint64) uint64 {
	if seed != 0 {
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// warnSkipKernels says, on a GPU, that gpu.EnvSkipKernels is set: the
// output of a model with kernels left out is wrong.
func warnSkipKernels(w io.Writer, device string) {
	if v := os.Getenv(gpu.EnvSkipKernels); v != "" && device != "cpu" {
		fmt.Fprintf(w, "warning: %s=%q leaves kernels out (a timing ablation): the output is wrong\n", gpu.EnvSkipKernels, v)
	}
}

// runLogprob is a --logprobs entry in --json's output; token is the id's
// text where the checkpoint has a tokenizer. -Inf is written -9999.
type runLogprob struct {
	ID      int32        `json:"id"`
	Token   *string      `json:"token,omitempty"`
	Logprob float64      `json:"logprob"`
	Top     []runLogprob `json:"top_logprobs,omitempty"`
}

// runLogprobs is --logprobs' records (the model's log-probabilities, before
// penalties and temperature) as --json writes them.
func runLogprobs(recs []cpu.StepLogprobs, tok *tokenizer.Tokenizer) []runLogprob {
	entry := func(id int32, lp float64) runLogprob {
		e := runLogprob{ID: id, Logprob: max(lp, -9999)}
		if tok != nil {
			e.Token = new(string(tok.TokenBytes(id)))
		}
		return e
	}
	out := []runLogprob{}
	for _, r := range recs {
		e := entry(r.ID, r.Logprob)
		for _, a := range r.Top {
			e.Top = append(e.Top, entry(a.ID, a.Logprob))
		}
		out = append(out, e)
	}
	return out
}
