package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"lagc/engine"
	"lagc/exec/cpu"
	"lagc/sched"
	"lagc/server"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve a model over an OpenAI-compatible HTTP API with continuous batching",
		usage:   "serve [--model CKPT] [--host 127.0.0.1] [--port 8080] [flags]",
		setup:   setupServe,
	})
}

type serveFlags struct {
	model, host, device, name string
	apiKey                    string
	port, slots, ctx, threads int
	maxQueue, budget          int
	grace                     time.Duration
	batchGEMM                 bool
}

func setupServe(fs *flag.FlagSet) func([]string) error {
	f := &serveFlags{}
	fs.StringVar(&f.model, "model", "", "checkpoint: an HF directory or a .gguf file (default: the bundled tiny model)")
	fs.StringVar(&f.host, "host", "127.0.0.1", "address to listen on (0.0.0.0: every interface)")
	fs.IntVar(&f.port, "port", 8080, "TCP port (0: any free port)")
	fs.StringVar(&f.device, "device", "auto", "cpu, cuda, or auto (cuda when a GPU is usable)")
	fs.StringVar(&f.apiKey, "api-key", "", "require \"Authorization: Bearer KEY\" on every route but /health and /metrics (default: $LAGC_API_KEY, which keeps the key out of the process list)")
	fs.StringVar(&f.name, "name", "", "model id clients name (default: the checkpoint's file or directory name)")
	fs.IntVar(&f.slots, "slots", 0, "sequence slots: the most requests generating at once (one set of KV caches each); 0: 8")
	fs.IntVar(&f.maxQueue, "max-queue", 0, "requests waiting for a slot before new ones get 429 (0: 4 x slots)")
	fs.IntVar(&f.budget, "budget", 256, "tokens per forward step: one per generating request, the rest prefill prompts")
	fs.IntVar(&f.ctx, "ctx", 0, "context length of every slot; 0: the model's max_position_embeddings")
	fs.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fs.BoolVar(&f.batchGEMM, "batch-gemm", false, "GPU: decode steps of more than 8 requests run the GEMMs (1.6x the throughput at 32 requests, 2.4x at 64 on an H200), but a request's greedy answer may then depend on what else runs")
	fs.DurationVar(&f.grace, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running requests may finish before they are cancelled")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		return runServe(f)
	}
}

func runServe(f *serveFlags) error {
	if f.port < 0 || f.port > 65535 {
		return fmt.Errorf("%w: --port %d: expected 0 to 65535", errUsage, f.port)
	}
	if f.slots < 0 || f.budget <= 0 || f.maxQueue < 0 || f.ctx < 0 || f.threads < 0 || f.grace < 0 {
		return fmt.Errorf("%w: --budget must be positive; --slots, --max-queue, --ctx, --threads and --shutdown-timeout must not be negative", errUsage)
	}
	if f.apiKey == "" {
		f.apiKey = os.Getenv("LAGC_API_KEY") // read here, not as the flag's default, which help would print
	}
	device, err := pickDevice(f.device, false)
	if err != nil {
		return err
	}
	if f.slots == 0 {
		f.slots = 8
	}
	if f.threads > 0 {
		cpu.SetMaxThreads(f.threads)
	}
	ck, path, err := openModelCheckpoint(f.model, false)
	if err != nil {
		return err
	}
	if f.model == "" && f.name == "" {
		f.name = "lagc-tiny"
	}
	t0 := time.Now()
	m, err := engine.OpenCheckpoint(ck, engine.Options{Device: device, MaxContext: f.ctx, Slots: f.slots, Progress: runIO.err, BatchGEMM: f.batchGEMM})
	if err != nil {
		return err // OpenCheckpoint closed ck
	}
	defer m.Close()
	srv, err := server.FromModel(m, server.Config{Name: f.name, Sched: sched.Config{MaxQueue: f.maxQueue, Budget: f.budget}, Log: runIO.err, APIKey: f.apiKey})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		srv.Close()
		return err
	}
	b, _ := m.Batch()
	fmt.Fprintf(runIO.err, "loaded %s on %s in %.2fs; %d slots, context %d\n", path, m.Device, time.Since(t0).Seconds(), f.slots, b.MaxPos())
	warnSkipKernels(runIO.err, m.Device)
	// The first signal shuts down gracefully; a second one (after stop)
	// kills the process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served, announced := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(announced)
		select {
		case <-ctx.Done():
			stop()
			fmt.Fprintf(runIO.err, "shutting down: running requests have %s to finish (a second signal exits now)\n", f.grace)
		case <-served:
		}
	}()
	if f.apiKey == "" && !isLoopback(f.host) {
		fmt.Fprintf(runIO.err, "warning: listening on %s without --api-key: anyone who can reach the port can use the model\n", f.host)
	}
	fmt.Fprintf(runIO.err, "listening on http://%s (OpenAI API under /v1)\n", ln.Addr())
	err = srv.Serve(ctx, ln, f.grace)
	close(served)
	<-announced
	return err
}

// isLoopback reports whether host (a --host value) names only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
