package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"lagc/sched"
)

// The official openai npm client (server/testdata/openai-node, installed
// with `npm ci` there) against a live server. Without node or the package
// these tests skip, unless LAGC_REQUIRE_NODE=1 (set by .ci/run).

func nodeClient(t *testing.T) (node, dir string) {
	t.Helper()
	dir = filepath.Join("testdata", "openai-node")
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed"
	default:
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
			missing = "the openai npm package is not installed (run npm ci in server/testdata/openai-node)"
		}
	}
	if missing != "" {
		if os.Getenv("LAGC_REQUIRE_NODE") == "1" {
			t.Fatalf("LAGC_REQUIRE_NODE=1 but %s", missing)
		}
		t.Skipf("%s; LAGC_REQUIRE_NODE=1 turns this skip into a failure", missing)
	}
	return node, dir
}

// runNode runs a client script against baseURL and decodes its summary.
func runNode(t *testing.T, script, baseURL, model string, summary any) {
	t.Helper()
	node, dir := nodeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, baseURL+"/v1", model)
	cmd.Dir = dir
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(out, summary); err != nil {
		t.Fatalf("node %s printed %q: %v", script, out, err)
	}
}

// TestOpenAINodeClient: chat, completions, streaming, typed errors, aborts
// and a bounded load of concurrent streams through the openai client; its
// greedy completion is exactly what engine.Generate produces.
func TestOpenAINodeClient(t *testing.T) {
	nodeClient(t)
	_, ts := startTiny(t, 4, 1024, sched.Config{Budget: 64})
	var summary struct {
		Completion    string `json:"completion"`
		Aborted       int    `json:"aborted"`
		LogprobTokens int    `json:"logprob_tokens"`
	}
	runNode(t, "chat.mjs", ts.URL, "tiny", &summary)
	want, _ := reference(t, tinyTokenizer(t).Encode("func main() {", true), 32)
	if summary.Completion != want || summary.Aborted != 2 || summary.LogprobTokens == 0 {
		t.Errorf("node saw %+v; engine.Generate gives %q", summary, want)
	}
	m := metricsText(t, ts.URL)
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(t, m, "lagc_requests_canceled_total") < 2 || metricValue(t, m, "lagc_running_requests") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the aborted streams were not cancelled on the server:\n%s", m)
		}
		time.Sleep(10 * time.Millisecond)
		m = metricsText(t, ts.URL)
	}
}

// TestOpenAINodeToolCalls: a reply in Laguna's tool-call format reaches the
// openai client as tool_calls (the tiny model writes none: the reply is
// scripted).
func TestOpenAINodeToolCalls(t *testing.T) {
	nodeClient(t)
	reply := "The user wants Paris.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
	_, ts := startScripted(t, 2, reply, nil, sched.Config{Budget: 4096})
	var summary struct {
		Arguments string `json:"arguments"`
	}
	runNode(t, "tools.mjs", ts.URL, "scripted", &summary)
	if summary.Arguments != `{"city":"Paris","days":3}` {
		t.Errorf("arguments %q", summary.Arguments)
	}
}

// limitedBuffer keeps the last 64 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if over := len(l.b) - 64<<10; over > 0 {
		l.b = l.b[over:]
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
