package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"lagc/sched"
)

// FuzzRequests: any body posted to either completion route gets an answer
// and never a panic or a server error: 200 with a JSON body (or an event
// stream ending in [DONE]), or 4xx with OpenAI's error object. The backend
// is scripted (a short reply, then the end of the turn), so what is fuzzed
// is the request's decoding, validation, templating and streaming.
func FuzzRequests(f *testing.F) {
	for _, s := range []struct {
		body string
		chat bool
	}{
		{`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, true},
		{`{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, true},
		{`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"tool_choice":"auto"}`, true},
		{`{"messages":[{"role":"assistant","content":"a","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"chat_template_kwargs":{"enable_thinking":false}}`, true},
		{`{"prompt":"func main() {","max_tokens":3,"temperature":0,"stop":["}"]}`, false},
		{`{"prompt":[1,2,3],"stream":true,"seed":7,"top_k":2,"top_p":0.5,"min_p":0.1,"repetition_penalty":1.2}`, false},
		{`{"prompt":"x","n":2}`, false},
		{`{"prompt":"x","n":3,"stream":true,"logprobs":2,"logit_bias":{"5":-100,"7":3.5},"presence_penalty":0.5,"frequency_penalty":-1}`, false},
		{`{"messages":[{"role":"user","content":"hi"}],"n":2,"stream":true,"logprobs":true,"top_logprobs":3,"stop":"o"}`, true},
		{`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20,"best_of":1}`, true},
		{`{"prompt":"func f() {","echo":true,"logprobs":3,"max_tokens":0,"stream":true}`, false},
		{`{"prompt":[2,5,9],"echo":true,"max_tokens":2,"n":2}`, false},
		{`{"model":"other","prompt":"x"}`, false},
		{`{"prompt":"x","max_tokens":100000}`, false},
	} {
		f.Add([]byte(s.body), s.chat)
	}
	srv, _ := startScripted(f, 2, "ok", nil, sched.Config{MaxQueue: 64})
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		out := rec.Body.Bytes()
		switch {
		case rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			events, err := readEvents(bytes.NewReader(out), -1)
			if err != nil || len(events) == 0 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("%s %q: stream %q (%v)", path, body, out, err)
			}
			for _, e := range events[:len(events)-1] {
				if !json.Valid([]byte(e)) {
					t.Fatalf("%s %q: event %q is not JSON", path, body, e)
				}
			}
		case rec.Code == http.StatusOK:
			if !json.Valid(out) {
				t.Fatalf("%s %q: 200 with %q", path, body, out)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Error struct {
					Message, Type string
				}
			}
			if err := json.Unmarshal(out, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%s %q: %d with %q", path, body, rec.Code, out)
			}
		default:
			t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, out)
		}
	})
}
