package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"lagc/sched"
)

func waitLoad(t *testing.T, srv *Server, waiting, running int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, r := srv.sched.Load()
		if w == waiting && r == running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, %d running; want %d and %d", w, r, waiting, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueueFull: with every slot busy and the queue full, a request gets
// 429 with Retry-After; the others complete.
func TestQueueFull(t *testing.T) {
	gate := make(chan struct{})
	srv, ts := startScripted(t, 1, "</think>hello", gate, sched.Config{MaxQueue: 1})
	body := map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}}
	done := make(chan chatResponse, 2)
	for range 2 {
		go func() {
			var r chatResponse
			post(t, ts.URL+"/v1/chat/completions", body, &r)
			done <- r
		}()
	}
	waitLoad(t, srv, 1, 1)
	resp := postJSON(t, ts.URL+"/v1/chat/completions", body)
	var e apiError
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || e.Error.Code == nil || *e.Error.Code != "queue_full" {
		t.Errorf("third request: %d, Retry-After %q, %+v", resp.StatusCode, resp.Header.Get("Retry-After"), e.Error)
	}
	close(gate)
	for range 2 {
		if r := <-done; len(r.Choices) != 1 || *r.Choices[0].Message.Content != "hello" {
			t.Errorf("queued request: %+v", r)
		}
	}
	m := metricsText(t, ts.URL)
	for _, want := range []string{`lagc_requests_total{code="429",endpoint="chat"} 1`, `lagc_requests_total{code="200",endpoint="chat"} 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// serveScripted runs Serve on a free port with a gated scripted backend.
func serveScripted(t *testing.T, grace time.Duration) (url string, gate chan struct{}, cancel func(), served chan error) {
	gate = make(chan struct{})
	srv, _ := startScripted(t, 2, "</think>"+strings.Repeat("word ", 20), gate, sched.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served = make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, grace) }()
	return "http://" + ln.Addr().String(), gate, cancel, served
}

func openStream(t *testing.T, url string) io.ReadCloser {
	t.Helper()
	resp := postJSON(t, url+"/v1/chat/completions", map[string]any{"stream": true, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Body
}

// TestGracefulShutdown: once shutdown begins no connection is accepted,
// and a running request still finishes whole.
func TestGracefulShutdown(t *testing.T) {
	url, gate, cancel, served := serveScripted(t, time.Minute)
	body := openStream(t, url)
	defer body.Close()
	first := mustEvents(t, body, 1) // the role chunk: the request is running
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections 10s after shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(gate)
	a := mustAssemble(t, append(first, mustEvents(t, body, -1)...))
	if a.Finish != "stop" || a.Content != strings.Repeat("word ", 20) {
		t.Errorf("request running at shutdown: %+v", a)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestShutdownAfterGrace: a request still running when the grace period
// ends is cancelled and told why.
func TestShutdownAfterGrace(t *testing.T) {
	url, gate, cancel, served := serveScripted(t, 50*time.Millisecond)
	body := openStream(t, url)
	defer body.Close()
	mustEvents(t, body, 1)
	cancel()
	time.AfterFunc(300*time.Millisecond, func() { close(gate) })
	events := mustEvents(t, body, -1)
	if len(events) < 2 || events[len(events)-1] != "[DONE]" || !strings.Contains(events[len(events)-2], "shut down before the generation finished") {
		t.Errorf("events after the grace period: %q", events)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
