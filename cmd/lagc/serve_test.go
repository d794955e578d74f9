package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"lagc/cuda/cudatest"
	"lagc/internal/fixture"
)

func TestServeUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--slots", "-1"}, "--slots, --max-queue"},
		{[]string{"serve", "--budget", "0"}, "--budget must be positive"},
		{[]string{"serve", "--port", "70000"}, "expected 0 to 65535"},
		{[]string{"serve", "--device", "tpu"}, `--device "tpu": expected cpu, cuda or auto`},
		{[]string{"serve", "extra"}, "unexpected arguments"},
	} {
		code, _, stderr := runCapture(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 with %q", tc.args, code, stderr, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeCommand: `lagc serve` on a free port answers a completion (on
// the CPU with --api-key: only with the key), and SIGTERM shuts it down
// cleanly (exit 0). On the GPU four requests sent at
// once (steps of several sequences must occur) each get the greedy
// completion `lagc run --device cuda` gives their prompt alone.
func TestServeCommand(t *testing.T) {
	for _, device := range []string{"cpu", "cuda"} {
		t.Run(device, func(t *testing.T) { testServeCommand(t, device) })
	}
}

func testServeCommand(t *testing.T, device string) {
	model := filepath.Join(fixture.Root(t), "models", "tiny")
	prompts := []string{"func main() {"}
	args := []string{"serve", "--model", model, "--port", "0", "--device", device, "--name", "tiny-test"}
	var want []string
	if device == "cuda" {
		cudatest.Device(t) // skip (or fail) without a GPU
		prompts = append(prompts, "package main\n\nimport", "// Sum adds", "type Tree struct {")
		for _, prompt := range prompts {
			code, js, stderr := runCapture(t, "run", "--model", model, "--device", "cuda", "--prompt", prompt, "-n", "8", "--json")
			var alone struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal([]byte(js), &alone); code != 0 || err != nil {
				t.Fatalf("run --device cuda: exit %d, %v: %s", code, err, stderr)
			}
			want = append(want, alone.Text)
		}
	} else {
		args = append(args, "--slots", "2", "--api-key", "test-key")
	}
	var stderr syncBuffer
	saved := runIO
	runIO.out, runIO.err = io.Discard, &stderr
	defer func() { runIO = saved }()
	done := make(chan int, 1)
	go func() { done <- runMain(args, io.Discard, &stderr) }()
	addr := regexp.MustCompile(`listening on (http://\S+)`)
	var url string
	for deadline := time.Now().Add(60 * time.Second); url == ""; {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if device == "cuda" && !strings.Contains(stderr.String(), "on cuda") {
		t.Errorf("serve --device cuda did not load on the GPU: %s", stderr.String())
	}
	type reply struct {
		code int
		text string
		n    int
		err  error
	}
	replies := make([]reply, len(prompts))
	var wg sync.WaitGroup
	for i, prompt := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"model": "tiny-test", "prompt": prompt, "max_tokens": 8, "temperature": 0})
			req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if device == "cpu" {
				req.Header.Set("Authorization", "Bearer test-key")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				replies[i].err = err
				return
			}
			defer resp.Body.Close()
			var out struct {
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			replies[i].err = json.NewDecoder(resp.Body).Decode(&out)
			replies[i].code, replies[i].n = resp.StatusCode, out.Usage.CompletionTokens
			if len(out.Choices) == 1 {
				replies[i].text = out.Choices[0].Text
			}
		}()
	}
	wg.Wait()
	for i, r := range replies {
		if r.err != nil || r.code != 200 || r.n != 8 {
			t.Fatalf("completion %d: %d, %d tokens, %v", i, r.code, r.n, r.err)
		}
		if device == "cuda" && r.text != want[i] {
			t.Errorf("prompt %q served on the GPU among %d: %q; lagc run --device cuda: %q", prompts[i], len(prompts), r.text, want[i])
		}
	}
	if device == "cpu" { // --api-key: a request without it is refused
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /v1/models without the key: %d, want 401", resp.StatusCode)
		}
	}
	if device == "cuda" {
		// A step of several sequences ran: the batch size histogram's
		// sum exceeds its count.
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := regexp.MustCompile(`(?m)^lagc_batch_size_sum (\S+)`).FindSubmatch(text)
		count := regexp.MustCompile(`(?m)^lagc_batch_size_count (\S+)`).FindSubmatch(text)
		if sum == nil || count == nil || string(sum[1]) == string(count[1]) {
			t.Errorf("no batched step on the GPU (batch size sum %q, count %q)", sum, count)
		}
	}
	// Prompt scoring (echo, logprobs, max_tokens 0) runs on the backend's
	// Step with every row; a greedy request after it is unchanged.
	postServe := func(body map[string]any, out any) int {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader(b))
		if device == "cpu" {
			req.Header.Set("Authorization", "Bearer test-key")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	var scored struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				Tokens        []string   `json:"tokens"`
				TokenLogprobs []*float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if code := postServe(map[string]any{"model": "tiny-test", "prompt": prompts[0], "max_tokens": 0, "echo": true, "logprobs": 2}, &scored); code != 200 || len(scored.Choices) != 1 {
		t.Fatalf("prompt scoring: %d %+v", code, scored)
	}
	lp := scored.Choices[0].Logprobs
	if scored.Choices[0].Text != prompts[0] || len(lp.Tokens) != scored.Usage.PromptTokens || len(lp.TokenLogprobs) != len(lp.Tokens) || lp.TokenLogprobs[0] != nil {
		t.Errorf("prompt scoring on %s: text %q, %d tokens for %d in the prompt", device, scored.Choices[0].Text, len(lp.Tokens), scored.Usage.PromptTokens)
	}
	for i, v := range lp.TokenLogprobs[1:] {
		if v == nil || !(*v <= 0 && *v > -100) {
			t.Errorf("prompt scoring on %s: token %d logprob %v", device, i+1, v)
		}
	}
	if device == "cuda" {
		var again struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		postServe(map[string]any{"model": "tiny-test", "prompt": prompts[0], "max_tokens": 8, "temperature": 0}, &again)
		if len(again.Choices) != 1 || again.Choices[0].Text != want[0] {
			t.Errorf("after prompt scoring on the GPU: %+v, want %q", again, want[0])
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stderr.String(), "shutting down") {
			t.Errorf("after SIGTERM: exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30s after SIGTERM: %s", stderr.String())
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.0.0.2": true,
		"0.0.0.0": false, "": false, "192.168.1.5": false, "example.com": false} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}
