package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"lagc/chat"
	"lagc/engine"
	"lagc/exec/cpu"
	"lagc/tokenizer"
)

func init() {
	register(&command{
		name:    "run",
		summary: "generate text or token ids with a model (CPU reference or GPU)",
		usage:   "run [--model CKPT] (--prompt TEXT | --prompt-ids 1,2,3 | --chat) [flags]",
		setup:   setupRun,
	})
}

type runFlags struct {
	model, prompt, promptIDs string
	chat, jsonOut, logits    bool
	n, chunk, ctx, threads   int
	device, yaml             string
	dtype, profile           string
	passes, disable          string
	temperature, topP, minP  float64
	topK                     int
	repeatPenalty            float64
	seed                     uint64
	raw                      bool
}

// runIO lets tests capture the command's streams.
var runIO = struct {
	in       io.Reader
	out, err io.Writer
}{os.Stdin, os.Stdout, os.Stderr}

func setupRun(fs *flag.FlagSet) func([]string) error {
	f := &runFlags{}
	fs.StringVar(&f.model, "model", "", "checkpoint: an HF directory or a .gguf file (default: the bundled tiny model)")
	fs.StringVar(&f.prompt, "prompt", "", "prompt text (needs the checkpoint's tokenizer)")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt as comma-separated token ids")
	fs.BoolVar(&f.chat, "chat", false, "interactive conversation using the checkpoint's chat template")
	fs.BoolVar(&f.raw, "raw", false, "with --prompt: encode the text as is (no bos), as tokenizer.encode(add_special_tokens=False) does")
	fs.IntVar(&f.n, "n", 64, "maximum number of tokens to generate")
	fs.StringVar(&f.device, "device", "auto", "cpu, cuda, or auto (cuda where a GPU is found, else cpu)")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object (prompt_ids, generated_ids, ...) instead of text")
	fs.BoolVar(&f.logits, "logits", false, "with --json: include the prompt's last-position logits as last_logits")
	fs.IntVar(&f.chunk, "chunk", 2048, "prefill chunk size in tokens")
	fs.StringVar(&f.dtype, "dtype", "bf16", "GPU activations and weights: bf16 or f32 (exact, for testing)")
	fs.StringVar(&f.profile, "profile", "", "GPU: write the GPU time of every kernel (eager launches) to FILE as a pprof profile")
	fs.IntVar(&f.ctx, "ctx", 0, "context length (KV cache size); 0: the model's max_position_embeddings")
	fs.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fs.StringVar(&f.yaml, "yaml", "", "model description (default: the embedded models/laguna.yaml)")
	fs.StringVar(&f.passes, "passes", "", "comma-separated pass pipeline (default: the standard one)")
	fs.StringVar(&f.disable, "disable-pass", "", "comma-separated passes to skip")
	fs.Float64Var(&f.temperature, "temperature", 0, "sampling temperature; 0 is greedy")
	fs.IntVar(&f.topK, "top-k", 0, "keep the k most likely tokens (0: all)")
	fs.Float64Var(&f.topP, "top-p", 1, "nucleus sampling: keep the smallest set with this much probability")
	fs.Float64Var(&f.minP, "min-p", 0, "drop tokens less likely than min-p times the most likely one")
	fs.Float64Var(&f.repeatPenalty, "repeat-penalty", 1, "penalty for tokens already in the context (1: none)")
	fs.Uint64Var(&f.seed, "seed", 0, "random seed for sampling (0: from the clock)")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		return runRun(f)
	}
}

func runRun(f *runFlags) error {
	given := 0
	for _, b := range []bool{f.prompt != "", f.promptIDs != "", f.chat} {
		if b {
			given++
		}
	}
	if given != 1 {
		return fmt.Errorf("%w: give exactly one of --prompt, --prompt-ids or --chat", errUsage)
	}
	if f.n < 0 || f.chunk <= 0 || f.ctx < 0 || f.threads < 0 {
		return fmt.Errorf("%w: -n, --chunk, --ctx and --threads must not be negative (--chunk positive)", errUsage)
	}
	if f.logits && !f.jsonOut {
		return fmt.Errorf("%w: --logits goes with --json", errUsage)
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
	sampler, err := cpu.NewSampler(cpu.SamplerConfig{Temperature: f.temperature, TopK: f.topK, TopP: f.topP,
		MinP: f.minP, RepetitionPenalty: f.repeatPenalty, Seed: seedOrClock(f.seed)})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	path, err := modelPath(f.model)
	if err != nil {
		return err
	}
	device, err := pickDevice(f.device)
	if err != nil {
		return err
	}
	if f.profile != "" && device != "cuda" {
		return fmt.Errorf("%w: --profile times GPU kernels: it needs --device cuda", errUsage)
	}
	t0 := time.Now()
	m, err := engine.Open(path, engine.Options{Device: device, YAMLPath: f.yaml, Passes: splitList(f.passes),
		Disable: splitList(f.disable), MaxContext: f.ctx, Progress: runIO.err,
		DType: f.dtype, Chunk: f.chunk, Profile: f.profile != ""})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Fprintf(runIO.err, "loaded %s on %s in %.2fs (%d layers, hidden %d, vocab %d)\n", path, m.Device,
		time.Since(t0).Seconds(), m.Config.NumLayers, m.Config.HiddenSize, m.Config.VocabSize)

	// Ctrl-C stops generation cleanly: the tokens so far are printed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var tok *tokenizer.Tokenizer
	if f.prompt != "" || f.chat {
		if tok, err = engine.LoadTokenizer(m.Checkpoint); err != nil {
			return fmt.Errorf("--prompt/--chat need a tokenizer: %w", err)
		}
	}
	gen := engine.GenOptions{MaxTokens: f.n, Sampler: sampler, Chunk: f.chunk}
	if f.chat {
		return runChat(ctx, m, tok, gen)
	}
	if f.prompt != "" {
		if ids, err = tok.EncodeContext(ctx, f.prompt, !f.raw); err != nil {
			return fmt.Errorf("--prompt: %w", err)
		}
	}
	if tok != nil {
		gen.Stop = tok.IsEOG
	} else if eos := m.Config.EOSTokenIDs; len(eos) > 0 && !f.jsonOut {
		gen.Stop = func(id int32) bool { return containsID(eos, id) }
	}
	var stream *tokenizer.StreamDecoder
	if tok != nil && !f.jsonOut {
		stream = tok.NewStreamDecoder(true)
		fmt.Fprint(runIO.out, f.prompt)
		gen.OnToken = func(id int32) error {
			_, err := io.WriteString(runIO.out, stream.Add(id))
			return err
		}
	} else if !f.jsonOut {
		gen.OnToken = func(id int32) error {
			_, err := fmt.Fprintf(runIO.out, "%d ", id)
			return err
		}
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
	if stream != nil {
		fmt.Fprintln(runIO.out, stream.Flush())
	} else if !f.jsonOut {
		fmt.Fprintln(runIO.out)
	}
	reportSpeed(res)
	if f.jsonOut {
		return writeRunJSON(res, tok, f.logits)
	}
	return nil
}

// modelPath returns the checkpoint to load: the flag, or the bundled model.
func modelPath(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return bundledModelPath()
}

// pickDevice resolves --device; auto falls back to the CPU with one line on
// stderr saying why.
func pickDevice(want string) (string, error) {
	switch want {
	case "cpu":
		return "cpu", nil
	case "cuda":
		return "cuda", nil
	case "auto", "":
		if reason := gpuUnavailable(); reason != "" {
			fmt.Fprintf(runIO.err, "running on the CPU: %s\n", reason)
			return "cpu", nil
		}
		return "cuda", nil
	}
	return "", fmt.Errorf("%w: --device %q: expected cpu, cuda or auto", errUsage, want)
}

func reportSpeed(res *engine.GenResult) {
	pre := float64(len(res.Prompt)) / res.PrefillTime.Seconds()
	dec := 0.0
	if n := len(res.Generated) - 1; n > 0 && res.DecodeTime > 0 {
		dec = float64(n) / res.DecodeTime.Seconds()
	}
	fmt.Fprintf(runIO.err, "prefill: %d tokens, %.1f tok/s; decode: %d tokens, %.1f tok/s; stop: %s\n",
		len(res.Prompt), pre, len(res.Generated), dec, res.StopReason)
}

func writeRunJSON(res *engine.GenResult, tok *tokenizer.Tokenizer, logits bool) error {
	out := map[string]any{
		"prompt_ids":    nonNil(res.Prompt),
		"generated_ids": nonNil(res.Generated),
		"stop_reason":   res.StopReason,
	}
	if tok != nil {
		out["text"] = tok.DecodeWith(res.Generated, tokenizer.DecodeOptions{SkipSpecial: true})
	}
	if logits {
		out["last_logits"] = res.LastLogits
	}
	enc := json.NewEncoder(runIO.out)
	return enc.Encode(out)
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// runChat runs an interactive conversation: each user line is appended to
// the history, the whole conversation is rendered with the checkpoint's
// template and the reply streamed until an end-of-generation token.
func runChat(ctx context.Context, m *engine.Model, tok *tokenizer.Tokenizer, gen engine.GenOptions) error {
	tmpl, special, err := engine.LoadChatTemplate(m.Checkpoint)
	if err != nil {
		return fmt.Errorf("--chat: %w", err)
	}
	gen.Stop = tok.IsEOG
	var history []chat.Message
	in := bufio.NewScanner(runIO.in)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	fmt.Fprintln(runIO.err, "chat: type a message and press Enter; an empty line or Ctrl-D ends")
	for {
		fmt.Fprint(runIO.err, "> ")
		if !in.Scan() {
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		if line == "" {
			return nil
		}
		history = append(history, chat.Message{Role: "user", Content: line})
		text, err := tmpl.Render(history, chat.Options{AddGenerationPrompt: true, SpecialTokens: special})
		if err != nil {
			return err
		}
		// The template writes its own special tokens.
		ids := tok.Encode(text, false)
		stream := tok.NewStreamDecoder(true)
		var reply strings.Builder
		gen.OnToken = func(id int32) error {
			s := stream.Add(id)
			reply.WriteString(s)
			_, err := io.WriteString(runIO.out, s)
			return err
		}
		turnCtx, cancel := signal.NotifyContext(ctx, os.Interrupt)
		res, err := m.Generate(turnCtx, ids, gen)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		s := stream.Flush()
		reply.WriteString(s)
		fmt.Fprintln(runIO.out, s)
		if res != nil {
			reportSpeed(res)
		}
		history = append(history, chat.Message{Role: "assistant", Content: strings.TrimSpace(reply.String())})
	}
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

func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a token id", p)
		}
		ids = append(ids, int32(v))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no ids")
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
