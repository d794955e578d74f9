package server

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"lagc/sched"
)

// TestTokenize: /tokenize counts a prompt as /v1/completions encodes it
// (usage.prompt_tokens agrees) and a chat as /v1/chat/completions renders
// it; /detokenize inverts it.
func TestTokenize(t *testing.T) {
	_, ts := startTiny(t, 1, 256, sched.Config{})
	tok := tinyTokenizer(t)
	const prompt = "func main() {"
	var tr tokenizeResponse
	if code := post(t, ts.URL+"/tokenize", map[string]any{"model": "tiny", "prompt": prompt}, &tr); code != 200 {
		t.Fatalf("status %d", code)
	}
	if want := tok.Encode(prompt, true); !slices.Equal(tr.Tokens, want) || tr.Count != len(want) || tr.MaxModelLen != 256 {
		t.Errorf("tokenize %q: %+v, want %v", prompt, tr, want)
	}
	var c completionResponse
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1}, &c)
	if c.Usage.PromptTokens != tr.Count {
		t.Errorf("completions counts %d prompt tokens, tokenize %d", c.Usage.PromptTokens, tr.Count)
	}
	var raw tokenizeResponse
	post(t, ts.URL+"/tokenize", map[string]any{"prompt": prompt, "add_special_tokens": false}, &raw)
	if want := tok.Encode(prompt, false); !slices.Equal(raw.Tokens, want) || len(raw.Tokens) != tr.Count-1 {
		t.Errorf("without special tokens: %v, want %v", raw.Tokens, want)
	}

	msgs := []map[string]any{{"role": "user", "content": "Write a Go function."}}
	var ct tokenizeResponse
	post(t, ts.URL+"/tokenize", map[string]any{"messages": msgs}, &ct)
	var ch chatResponse
	post(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}, &ch)
	if ct.Count == 0 || ch.Usage.PromptTokens != ct.Count {
		t.Errorf("chat: tokenize counts %d, chat completions %d", ct.Count, ch.Usage.PromptTokens)
	}
	var noGen tokenizeResponse
	post(t, ts.URL+"/tokenize", map[string]any{"messages": msgs, "add_generation_prompt": false}, &noGen)
	if noGen.Count >= ct.Count || !slices.Equal(noGen.Tokens, ct.Tokens[:noGen.Count]) {
		t.Errorf("without the generation prompt: %d tokens %v, with: %d %v", noGen.Count, noGen.Tokens, ct.Count, ct.Tokens)
	}

	var d struct{ Prompt string }
	if code := post(t, ts.URL+"/detokenize", map[string]any{"tokens": ct.Tokens}, &d); code != 200 || !strings.Contains(d.Prompt, "Write a Go function.") {
		t.Errorf("detokenize: %d %q", code, d.Prompt)
	}
	if d.Prompt != tok.Decode(ct.Tokens) {
		t.Errorf("detokenize %q, want %q", d.Prompt, tok.Decode(ct.Tokens))
	}

	for _, bad := range []struct {
		path  string
		body  map[string]any
		code  int
		param string
	}{
		{"/tokenize", map[string]any{}, 400, "prompt"},
		{"/tokenize", map[string]any{"prompt": "x", "messages": msgs}, 400, "prompt"},
		{"/tokenize", map[string]any{"messages": msgs, "add_special_tokens": true}, 400, "add_special_tokens"},
		{"/tokenize", map[string]any{"messages": []map[string]any{{"role": "robot", "content": "x"}}}, 400, "messages[0]"},
		{"/tokenize", map[string]any{"prompt": "x", "model": "gpt-4"}, 404, "model"},
		{"/detokenize", map[string]any{"tokens": []int{1, 99999}}, 400, "tokens"},
		{"/detokenize", map[string]any{"tokens": []int{-1}}, 400, "tokens"},
	} {
		var e apiError
		if code := post(t, ts.URL+bad.path, bad.body, &e); code != bad.code || e.Error.Param == nil || *e.Error.Param != bad.param {
			t.Errorf("%s %v: %d %+v, want %d on %q", bad.path, bad.body, code, e.Error, bad.code, bad.param)
		}
	}
}

// TestAPIKey: with Config.APIKey every route but /health and /metrics asks
// for it as a bearer token (401 in OpenAI's error shape otherwise).
func TestAPIKey(t *testing.T) {
	m := openTiny(t, 1, 128)
	srv, err := FromModel(m, Config{Name: "tiny", APIKey: "s3cret", Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ts := listen(t, srv)
	do := func(method, path, auth string, body string) (int, http.Header, []byte) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	comp := `{"prompt":"x","max_tokens":2}`
	for _, tc := range []struct {
		method, path, auth, body string
		want                     int
	}{
		{"POST", "/v1/completions", "", comp, 401},
		{"POST", "/v1/completions", "Bearer wrong", comp, 401},
		{"POST", "/v1/completions", "s3cret", comp, 401}, // not a bearer token
		{"POST", "/v1/completions", "Bearer s3cret", comp, 200},
		{"GET", "/v1/models", "", "", 401},
		{"GET", "/v1/models", "Bearer s3cret", "", 200},
		{"POST", "/tokenize", "", `{"prompt":"x"}`, 401},
		{"GET", "/health", "", "", 200},
		{"GET", "/metrics", "", "", 200},
	} {
		code, h, b := do(tc.method, tc.path, tc.auth, tc.body)
		if code != tc.want {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.auth, code, b, tc.want)
			continue
		}
		if code == 401 {
			var e apiError
			if json.Unmarshal(b, &e) != nil || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 body %s, WWW-Authenticate %q", tc.method, tc.path, b, h.Get("WWW-Authenticate"))
			}
		}
	}
}
