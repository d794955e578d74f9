package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"lagc/engine"
	"lagc/internal/fixture"
	"lagc/sched"
	"lagc/tokenizer"
)

func TestRoutes(t *testing.T) {
	_, ts := startTiny(t, 1, 256, sched.Config{})
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
			MaxLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "tiny" || models.Data[0].MaxLen != 256 {
		t.Errorf("/v1/models: %+v", models)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/health", 200, `"status":"ok"`},
		{"GET", "/nope", 404, `"code":"not_found"`},
		{"GET", "/v1/chat/completions", 405, `takes POST, not GET`},
		{"POST", "/v1/models", 405, `takes GET, not POST`},
		{"GET", "/metrics", 200, "lagc_queue_length 0"},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s: %d %s; want %d with %q", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
	}
}

// reference generates greedily with engine.Generate on a model of its own
// and decodes as the server does.
func reference(t *testing.T, prompt []int32, maxTokens int) (string, string) {
	t.Helper()
	m := openTiny(t, 1, 256)
	tok, err := engine.LoadTokenizer(m.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Generate(context.Background(), prompt, engine.GenOptions{MaxTokens: maxTokens, Stop: tok.IsEOG})
	if err != nil {
		t.Fatal(err)
	}
	finish := "length"
	if res.StopReason == "stop" {
		finish = "stop"
	}
	return tok.DecodeWith(res.Generated, tokenizer.DecodeOptions{SkipSpecial: true}), finish
}

func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	tok, err := tokenizer.LoadHFDir(tinyDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCompletions: greedy text completions, whole or streamed, are what
// engine.Generate produces; stop strings cut the text.
func TestCompletions(t *testing.T) {
	_, ts := startTiny(t, 2, 256, sched.Config{})
	const prompt = "func main() {"
	want, wantFinish := reference(t, tinyTokenizer(t).Encode(prompt, true), 40)
	var resp completionResponse
	if code := post(t, ts.URL+"/v1/completions", map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 40, "temperature": 0}, &resp); code != 200 {
		t.Fatalf("status %d", code)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text != want || *resp.Choices[0].FinishReason != wantFinish || resp.Object != "text_completion" {
		t.Fatalf("got %+v\nwant text %q, finish %s", resp, want, wantFinish)
	}
	if u := resp.Usage; u == nil || u.PromptTokens != 5 || u.CompletionTokens != 40 || u.TotalTokens != 45 {
		t.Errorf("usage %+v", resp.Usage)
	}
	events := streamEvents(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 40, "temperature": 0, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}})
	var text, finish string
	var u *usage
	for _, e := range events[:len(events)-1] {
		var c completionResponse
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			text += ch.Text
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			u = c.Usage
		}
	}
	if text != want || finish != wantFinish || u == nil || u.CompletionTokens != 40 {
		t.Errorf("streamed %q (%s, usage %+v), want %q", text, finish, u, want)
	}
	// A stop string: the text ends just before its first occurrence.
	stop := strings.Fields(want)[3]
	var stopped completionResponse
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 40, "temperature": 0, "stop": []string{"@@@", stop}}, &stopped)
	if got, cut := stopped.Choices[0].Text, want[:strings.Index(want, stop)]; got != cut || *stopped.Choices[0].FinishReason != "stop" {
		t.Errorf("stop %q: %q (%s), want %q", stop, got, *stopped.Choices[0].FinishReason, cut)
	}
	// Token ids as the prompt, and a seeded sample repeats.
	var a, b completionResponse
	body := map[string]any{"prompt": []int{2, 100, 200}, "max_tokens": 20, "temperature": 0.9, "top_k": 50, "top_p": 0.9, "min_p": 0.05, "seed": 7}
	post(t, ts.URL+"/v1/completions", body, &a)
	post(t, ts.URL+"/v1/completions", body, &b)
	if a.Choices[0].Text != b.Choices[0].Text || a.Usage.PromptTokens != 3 {
		t.Errorf("seeded samples differ: %q and %q", a.Choices[0].Text, b.Choices[0].Text)
	}
}

// TestChat: a chat completion renders the template, returns reasoning
// separately (the bundled template opens <think>), and streams the same.
func TestChat(t *testing.T) {
	_, ts := startTiny(t, 2, 512, sched.Config{})
	body := map[string]any{"model": "tiny", "max_tokens": 30, "temperature": 0,
		"messages": []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": []map[string]string{{"type": "text", "text": "Write a"}, {"type": "text", "text": " Go function."}}}}}
	var resp chatResponse
	if code := post(t, ts.URL+"/v1/chat/completions", body, &resp); code != 200 {
		t.Fatalf("status %d: %+v", code, resp)
	}
	msg := resp.Choices[0].Message
	if resp.Object != "chat.completion" || msg.Role != "assistant" || msg.ReasoningContent == nil || *msg.ReasoningContent == "" {
		t.Fatalf("response %+v, message %+v", resp, msg)
	}
	body["stream"] = true
	a := mustAssemble(t, streamEvents(t, ts.URL+"/v1/chat/completions", body))
	content := ""
	if msg.Content != nil {
		content = *msg.Content
	}
	if a.Role != "assistant" || a.Reasoning != *msg.ReasoningContent || a.Content != content || a.Finish != *resp.Choices[0].FinishReason || len(a.IDs) != 1 {
		t.Errorf("streamed %+v\nwhole %+v %+v", a, msg, resp.Choices[0])
	}
	// Without thinking the reply is all content.
	body["stream"] = false
	body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
	var plain chatResponse
	post(t, ts.URL+"/v1/chat/completions", body, &plain)
	if m := plain.Choices[0].Message; m.ReasoningContent != nil || m.Content == nil || *m.Content == "" {
		t.Errorf("enable_thinking false: %+v", m)
	}
}

// TestToolCalls: a reply in Laguna's tool-call format (from a scripted
// backend: the tiny model does not write one) comes back as OpenAI
// tool_calls, whole and streamed.
func TestToolCalls(t *testing.T) {
	reply := "The user wants weather.</think>Let me check.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
	_, ts := startScripted(t, 2, reply, nil, sched.Config{Budget: 4096})
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather forecast",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]string{"type": "string"}, "days": map[string]string{"type": "integer"}}}}}}
	body := map[string]any{"model": "scripted", "tools": tools, "messages": []map[string]any{
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": "", "tool_calls": []map[string]any{{"id": "call_1", "type": "function", "function": map[string]string{"name": "get_weather", "arguments": `{"city": "Lyon", "days": 1}`}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
		{"role": "user", "content": "And Paris?"},
	}}
	var resp chatResponse
	if code := post(t, ts.URL+"/v1/chat/completions", body, &resp); code != 200 {
		t.Fatalf("status %d", code)
	}
	ch := resp.Choices[0]
	m := ch.Message
	if *ch.FinishReason != "tool_calls" || *m.ReasoningContent != "The user wants weather." || *m.Content != "Let me check." || len(m.ToolCalls) != 1 {
		t.Fatalf("choice %+v, message %+v: content %q", ch, m, *m.Content)
	}
	tc := m.ToolCalls[0]
	if tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris","days":3}` || tc.Index != nil {
		t.Errorf("tool call %+v", tc)
	}
	body["stream"] = true
	a := mustAssemble(t, streamEvents(t, ts.URL+"/v1/chat/completions", body))
	if a.Finish != "tool_calls" || a.Reasoning != *m.ReasoningContent || a.Content != *m.Content || len(a.Calls) != 1 || a.Calls[0].Function != tc.Function {
		t.Errorf("streamed %+v", a)
	}
	// tool_choice none: the markup stays text.
	body["stream"] = false
	body["tool_choice"] = "none"
	var none chatResponse
	post(t, ts.URL+"/v1/chat/completions", body, &none)
	if m := none.Choices[0].Message; len(m.ToolCalls) != 0 || !strings.Contains(*m.Content, "<tool_call>get_weather") || *none.Choices[0].FinishReason != "stop" {
		t.Errorf("tool_choice none: %+v", m)
	}
}

// TestBadRequests: invalid requests get OpenAI error bodies naming what was
// expected and what was found.
func TestBadRequests(t *testing.T) {
	srv, ts := startTiny(t, 1, 64, sched.Config{})
	srv.cfg.MaxBodyBytes = 4096
	user := []map[string]any{{"role": "user", "content": "hi"}}
	long := strings.Repeat("func main() { x := 1 }\n", 40)
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		param      string
		code       string
		msg        string
	}{
		{"not JSON", "chat", "{", 400, "", "", "not valid JSON"},
		{"no messages", "chat", map[string]any{}, 400, "messages", "", "must not be empty"},
		{"bad role", "chat", map[string]any{"messages": []map[string]any{{"role": "robot", "content": "x"}}}, 400, "messages[0]", "", `role "robot": expected system`},
		{"image part", "chat", map[string]any{"messages": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "image_url"}}}}}, 400, "messages[0]", "", "reads only text"},
		{"bad tool arguments", "chat", map[string]any{"messages": []map[string]any{{"role": "assistant", "tool_calls": []map[string]any{{"function": map[string]string{"name": "f", "arguments": "[1]"}}}}}}, 400, "messages[0]", "", "expected a JSON object as a string"},
		{"bad tool", "chat", map[string]any{"messages": user, "tools": []map[string]any{{"type": "retrieval"}}}, 400, "tools", "", `expected {"type": "function"`},
		{"tool_choice required", "chat", map[string]any{"messages": user, "tool_choice": "required"}, 400, "tool_choice", "", "not supported"},
		{"json mode", "chat", map[string]any{"messages": user, "response_format": map[string]string{"type": "json_object"}}, 400, "response_format", "", "not supported"},
		{"other model", "chat", map[string]any{"messages": user, "model": "gpt-4"}, 404, "model", "model_not_found", `this server serves "tiny"`},
		{"n", "chat", map[string]any{"messages": user, "n": 129}, 400, "n", "", "n must be in [1, 128], got 129"},
		{"n 0", "completions", map[string]any{"prompt": "x", "n": 0}, 400, "n", "", "got 0"},
		{"n over slots and queue", "completions", map[string]any{"prompt": "x", "n": 6}, 400, "n", "", "n is 6; this server holds at most 5 (1 running at once, 4 queued)"},
		{"best_of", "completions", map[string]any{"prompt": "x", "n": 2, "best_of": 3}, 400, "best_of", "", "best_of must equal n (2)"},
		{"temperature", "completions", map[string]any{"prompt": "x", "temperature": 3}, 400, "temperature", "", "in [0, 2], got 3"},
		{"top_p 0", "completions", map[string]any{"prompt": "x", "top_p": 0}, 400, "top_p", "", "(0, 1]"},
		{"top_k", "completions", map[string]any{"prompt": "x", "top_k": -5}, 400, "top_k", "", "got -5"},
		{"max_tokens 0", "completions", map[string]any{"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "", "at least 1 (0 only with echo, to score the prompt), got 0"},
		{"chat echo", "chat", map[string]any{"messages": user, "echo": true}, 400, "echo", "", "echo is for /v1/completions"},
		{"presence_penalty", "completions", map[string]any{"prompt": "x", "presence_penalty": 2.5}, 400, "presence_penalty", "", "in [-2, 2], got 2.5"},
		{"frequency_penalty", "chat", map[string]any{"messages": user, "frequency_penalty": -3}, 400, "frequency_penalty", "", "in [-2, 2], got -3"},
		{"logit_bias key", "completions", map[string]any{"prompt": "x", "logit_bias": map[string]any{"hello": 1}}, 400, "logit_bias", "", `key "hello" is not a token id`},
		{"logit_bias value", "completions", map[string]any{"prompt": "x", "logit_bias": map[string]any{"5": 101}}, 400, "logit_bias", "", "in [-100, 100], got 101"},
		{"logit_bias type", "chat", map[string]any{"messages": user, "logit_bias": map[string]any{"5": "ban"}}, 400, "logit_bias", "", "in [-100, 100], got ban"},
		{"logit_bias outside the vocabulary", "completions", map[string]any{"prompt": "x", "logit_bias": map[string]any{"99999": -100}}, 400, "logit_bias", "", "token 99999 is outside the vocabulary"},
		{"logprobs over 20", "completions", map[string]any{"prompt": "x", "logprobs": 21}, 400, "logprobs", "", "in [0, 20], got 21"},
		{"logprobs type", "completions", map[string]any{"prompt": "x", "logprobs": "all"}, 400, "logprobs", "", "an integer in [0, 20]"},
		{"chat logprobs type", "chat", map[string]any{"messages": user, "logprobs": 3}, 400, "logprobs", "", "true or false, got 3"},
		{"top_logprobs alone", "chat", map[string]any{"messages": user, "top_logprobs": 2}, 400, "top_logprobs", "", "needs logprobs: true"},
		{"top_logprobs over 20", "chat", map[string]any{"messages": user, "logprobs": true, "top_logprobs": 21}, 400, "top_logprobs", "", "in [0, 20], got 21"},
		{"stop type", "completions", map[string]any{"prompt": "x", "stop": 5}, 400, "", "", "a string or an array of strings"},
		{"prompt batch", "completions", map[string]any{"prompt": []string{"a", "b"}}, 400, "prompt", "", "batch of 2"},
		{"prompt type", "completions", map[string]any{"prompt": 7}, 400, "prompt", "", "expected a string, an array of token ids"},
		{"empty prompt", "completions", map[string]any{"prompt": []int{}}, 400, "prompt", "", "empty"},
		{"id outside the vocabulary", "completions", map[string]any{"prompt": []int{1, 99999}}, 400, "", "", "outside the vocabulary"},
		{"prompt over the context", "completions", map[string]any{"prompt": long}, 400, "prompt", "context_length_exceeded", "maximum context length is 64 tokens"},
		{"completion over the context", "completions", map[string]any{"prompt": "x", "max_tokens": 100}, 400, "max_tokens", "context_length_exceeded", "you requested 102 tokens (2 in the prompt, 100 for the completion)"},
		{"body too large", "completions", map[string]any{"prompt": strings.Repeat("x", 5000)}, 413, "", "", "larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e apiError
			path := map[string]string{"chat": "/v1/chat/completions", "completions": "/v1/completions"}[tc.path]
			var code int
			if s, ok := tc.body.(string); ok {
				resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(s))
				if err != nil {
					t.Fatal(err)
				}
				code = resp.StatusCode
				json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
			} else {
				code = post(t, ts.URL+path, tc.body, &e)
			}
			d := e.Error
			if code != tc.status || !strings.Contains(d.Message, tc.msg) || d.Type == "" {
				t.Fatalf("%d %+v; want %d with %q", code, d, tc.status, tc.msg)
			}
			if (tc.param != "") != (d.Param != nil) || (d.Param != nil && *d.Param != tc.param) {
				t.Errorf("param %v, want %q", d.Param, tc.param)
			}
			if (tc.code != "") != (d.Code != nil) || (d.Code != nil && *d.Code != tc.code) {
				t.Errorf("code %v, want %q", d.Code, tc.code)
			}
		})
	}
}

// TestFromModelNeedsTokenizer: a checkpoint without a tokenizer cannot be
// served, and says so.
func TestFromModelNeedsTokenizer(t *testing.T) {
	m, err := engine.Open(fixture.Dirs(t)[0], engine.Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := FromModel(m, Config{Log: io.Discard}); err == nil || !strings.Contains(err.Error(), "serving needs the checkpoint's tokenizer") {
		t.Errorf("error %v", err)
	}
}

// TestNoChatTemplate: without a template chat completions are refused and
// text completions still work.
func TestNoChatTemplate(t *testing.T) {
	tok := tinyTokenizer(t)
	srv, err := New(newScript(1, tok.VocabSize(), tok.Encode("ok", false)), tok.VocabSize(), Config{Name: "m", Tokenizer: tok, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ts := listen(t, srv)
	var e apiError
	if code := post(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}}, &e); code != 400 || !strings.Contains(e.Error.Message, "no chat template") {
		t.Errorf("chat: %d %+v", code, e.Error)
	}
	var c completionResponse
	if code := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "a", "max_tokens": 1}, &c); code != 200 || c.Choices[0].Text != "ok" {
		t.Errorf("completion: %d %+v", code, c)
	}
}
