package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"lagc/chat"
	"lagc/engine"
	"lagc/internal/fixture"
	"lagc/sched"
	"lagc/tokenizer"
)

func tinyDir(t testing.TB) string { return filepath.Join(fixture.Root(t), "models", "tiny") }

// openTiny opens the bundled model on the CPU.
func openTiny(t testing.TB, slots, ctx int) *engine.Model {
	t.Helper()
	m, err := engine.Open(tinyDir(t), engine.Options{Slots: slots, MaxContext: ctx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startTiny serves the bundled model on 127.0.0.1.
func startTiny(t testing.TB, slots, ctx int, sc sched.Config) (*Server, *httptest.Server) {
	t.Helper()
	m := openTiny(t, slots, ctx)
	srv, err := FromModel(m, Config{Name: "tiny", Sched: sc, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return srv, listen(t, srv)
}

func listen(t testing.TB, srv *Server) *httptest.Server {
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close() // ends streams still running, so that ts.Close does not wait on them
		ts.Close()
	})
	return ts
}

// scriptBackend is a Batcher that answers every request with the same
// tokens, one per step after the prompt (which must fit one step), for
// testing what the server makes of replies the tiny model never writes.
// With a gate, every step waits for a value from it.
type scriptBackend struct {
	script []int32
	vocab  int
	gate   chan struct{}
	steps  []int // steps since the slot was reset
	lens   []int
}

func newScript(slots, vocab int, script []int32) *scriptBackend {
	return &scriptBackend{script: script, vocab: vocab, steps: make([]int, slots), lens: make([]int, slots)}
}

func (b *scriptBackend) Slots() int               { return len(b.steps) }
func (b *scriptBackend) MaxPos() int              { return 4096 }
func (b *scriptBackend) SlotLen(slot int) int     { return b.lens[slot] }
func (b *scriptBackend) Rewind(slot, n int) error { return fmt.Errorf("scripted: no rewinding") }
func (b *scriptBackend) ResetSlot(slot int)       { b.steps[slot], b.lens[slot] = 0, 0 }
func (b *scriptBackend) Step(segs []engine.Segment) ([]float32, []int32, error) {
	if b.gate != nil {
		<-b.gate
	}
	T := 0
	for _, s := range segs {
		T += len(s.Tokens)
	}
	logits := make([]float32, T*b.vocab)
	next := make([]int32, T)
	r := 0
	for _, s := range segs {
		r += len(s.Tokens)
		id := b.script[min(b.steps[s.Slot], len(b.script)-1)]
		next[r-1] = id
		logits[(r-1)*b.vocab+int(id)] = 100 // decisive at any temperature
		b.steps[s.Slot]++
		b.lens[s.Slot] += len(s.Tokens)
	}
	return logits, next, nil
}

// startScripted serves a scriptBackend replying with text (then the end of
// the assistant turn) with the bundled model's tokenizer and template.
func startScripted(t testing.TB, slots int, reply string, gate chan struct{}, sc sched.Config) (*Server, *httptest.Server) {
	t.Helper()
	tok, err := tokenizer.LoadHFDir(tinyDir(t))
	if err != nil {
		t.Fatal(err)
	}
	src, err := chat.LoadHFDir(tinyDir(t))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Compile(src.Default)
	if err != nil {
		t.Fatal(err)
	}
	script := append(tok.Encode(reply, false), tok.Encode("</assistant>", false)...)
	b := newScript(slots, tok.VocabSize(), script)
	b.gate = gate
	srv, err := New(b, tok.VocabSize(), Config{Name: "scripted", Tokenizer: tok, Template: tmpl, SpecialTokens: src.SpecialTokens, Sched: sc, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return srv, listen(t, srv)
}

// postJSON sends body as JSON; the caller closes the response.
func postJSON(t testing.TB, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// post sends a JSON body and decodes the JSON answer into out (if not nil).
func post(t testing.TB, url string, body any, out any) int {
	t.Helper()
	resp := postJSON(t, url, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: %d %s: %v", url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// streamEvents posts a streaming request and returns its data events (the
// final [DONE] included).
func streamEvents(t testing.TB, url string, body any) []string {
	t.Helper()
	resp := postJSON(t, url, body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s: %s", url, resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	events, err := readEvents(resp.Body, -1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// readEvents reads up to n data events (n < 0: all).
func readEvents(r io.Reader, n int) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n != 0 && sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return events, fmt.Errorf("stream line %q is not a data event", line)
		}
		events = append(events, data)
		n--
	}
	return events, sc.Err()
}

// assembled is a streamed chat completion put together.
type assembled struct {
	Role, Reasoning, Content, Finish string
	Calls                            []toolCall
	Usage                            *usage
	IDs                              map[string]bool
}

func assembleChat(events []string) (assembled, error) {
	a := assembled{IDs: map[string]bool{}}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		return a, fmt.Errorf("stream does not end with [DONE]: %q", events)
	}
	for _, e := range events[:len(events)-1] {
		var c chatResponse
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			return a, fmt.Errorf("event %q: %v", e, err)
		}
		if c.Object != "chat.completion.chunk" {
			return a, fmt.Errorf("event object %q", c.Object)
		}
		a.IDs[c.ID] = true
		if c.Usage != nil {
			a.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			d := ch.Delta
			if d == nil {
				return a, fmt.Errorf("chunk without a delta: %s", e)
			}
			a.Role += d.Role
			if d.Content != nil {
				a.Content += *d.Content
			}
			if d.ReasoningContent != nil {
				a.Reasoning += *d.ReasoningContent
			}
			for _, tc := range d.ToolCalls {
				if tc.Index == nil || *tc.Index != len(a.Calls) {
					return a, fmt.Errorf("tool call delta with index %v after %d calls", tc.Index, len(a.Calls))
				}
				tc.Index = nil
				a.Calls = append(a.Calls, tc)
			}
			if ch.FinishReason != nil {
				a.Finish = *ch.FinishReason
			}
		}
	}
	return a, nil
}

func mustAssemble(t testing.TB, events []string) assembled {
	t.Helper()
	a, err := assembleChat(events)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustEvents(t testing.TB, r io.Reader, n int) []string {
	t.Helper()
	events, err := readEvents(r, n)
	if err != nil {
		t.Fatal(err)
	}
	return events
}
