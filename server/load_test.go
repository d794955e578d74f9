package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"lagc/sched"
)

// loadRequest is one client of the load test.
type loadRequest struct {
	path   string
	body   map[string]any
	cancel bool // the client hangs up after a few events
}

func loadRequests() []loadRequest {
	snippets := []string{"func main() {", "package http\n\nimport (", "type Server struct {", "// Copyright", "for i := 0; i < n; i++ {",
		"if err != nil {\n\treturn", "func (s *Stack) Push(", "var ErrClosed = errors.New("}
	var reqs []loadRequest
	for i, s := range snippets {
		body := map[string]any{"prompt": s, "max_tokens": 24 + 3*i, "temperature": 0}
		if i%3 == 2 { // sampled, reproducible with its seed
			body["temperature"], body["top_p"], body["seed"] = 0.8, 0.9, i
		}
		reqs = append(reqs, loadRequest{path: "/v1/completions", body: body})
		chatBody := map[string]any{"max_tokens": 20 + 2*i, "temperature": 0,
			"messages": []map[string]string{{"role": "user", "content": "Explain " + s}}}
		reqs = append(reqs, loadRequest{path: "/v1/chat/completions", body: chatBody})
	}
	for i := range 3 {
		reqs = append(reqs, loadRequest{path: "/v1/completions", cancel: true,
			body: map[string]any{"prompt": snippets[i], "max_tokens": 400, "temperature": 0}})
	}
	return reqs
}

// streamText runs a request streaming and returns the concatenated text
// (reasoning, then a separator, then content for chat) and finish reason;
// with hangUp it closes the connection after three events.
func streamText(url string, r loadRequest, hangUp bool) (string, string, error) {
	body := map[string]any{"stream": true}
	for k, v := range r.body {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+r.path, "application/json", bytes.NewReader(b))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", "", fmt.Errorf("status %d", resp.StatusCode)
	}
	if hangUp {
		_, err := readEvents(resp.Body, 3)
		return "", "", err
	}
	events, err := readEvents(resp.Body, -1)
	if err != nil {
		return "", "", err
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		return "", "", fmt.Errorf("stream does not end with [DONE]: %q", events)
	}
	if r.path == "/v1/completions" {
		var text, finish string
		for _, e := range events[:len(events)-1] {
			var c completionResponse
			if err := json.Unmarshal([]byte(e), &c); err != nil {
				return "", "", err
			}
			for _, ch := range c.Choices {
				text += ch.Text
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
			}
		}
		return text, finish, nil
	}
	a, err := assembleChat(events)
	if err != nil {
		return "", "", err
	}
	if len(a.IDs) != 1 {
		return "", "", fmt.Errorf("chunks of %d ids in one stream", len(a.IDs))
	}
	return a.Reasoning + "\x00" + a.Content, a.Finish, nil
}

// TestLoad: concurrent streaming clients, some hanging up mid-way, against
// the bundled model with fewer slots than clients. Every completed
// response equals the same request served alone, the hung-up ones free
// their slots, and steps did batch several sequences.
func TestLoad(t *testing.T) {
	srv, ts := startTiny(t, 4, 512, sched.Config{Budget: 64})
	reqs := loadRequests()
	type answer struct{ text, finish string }
	alone := make([]answer, len(reqs))
	for i, r := range reqs {
		if r.cancel {
			continue
		}
		text, finish, err := streamText(ts.URL, r, false)
		if err != nil {
			t.Fatalf("request %d alone: %v", i, err)
		}
		alone[i] = answer{text, finish}
	}
	before := metricValue(t, metricsText(t, ts.URL), "lagc_batch_size_count")
	t0 := time.Now()

	var wg sync.WaitGroup
	got := make([]answer, len(reqs))
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i].text, got[i].finish, errs[i] = streamText(ts.URL, r, r.cancel)
		}()
	}
	wg.Wait()
	t.Logf("alone done; together %s", time.Since(t0))
	for i, r := range reqs {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
		} else if !r.cancel && got[i] != alone[i] {
			t.Errorf("request %d (%s %v):\n together %q\n alone    %q", i, r.path, r.body["prompt"], got[i], alone[i])
		}
	}
	// The hung-up requests are cancelled and their slots freed.
	deadline := time.Now().Add(20 * time.Second)
	var m string
	for {
		m = metricsText(t, ts.URL)
		if metricValue(t, m, "lagc_requests_canceled_total") == 3 && metricValue(t, m, "lagc_running_requests") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hung-up requests not cancelled:\n%s", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w, r := srv.sched.Load(); w != 0 || r != 0 {
		t.Errorf("%d waiting, %d running after the load", w, r)
	}
	steps := metricValue(t, m, "lagc_batch_size_count") - before
	mean := metricValue(t, m, "lagc_batch_size_sum") / metricValue(t, m, "lagc_batch_size_count")
	t.Logf("%d clients, %.0f steps under load; %.2f sequences per step over the whole test", len(reqs), steps, mean)
	if metricValue(t, m, `lagc_batch_size_bucket{le="1"}`) == metricValue(t, m, "lagc_batch_size_count") {
		t.Errorf("no step ran more than one sequence:\n%s", m)
	}
}

// metricValue reads one sample of a Prometheus text exposition.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %s in the metrics", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
