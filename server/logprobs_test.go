package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"lagc/engine"
	"lagc/sched"
)

// refLogprobs generates n greedy tokens after prompt with engine.Generate
// and returns them with the log-softmax of the logits each was chosen from,
// computed here in float64 from a second pass that keeps every row.
func refLogprobs(t *testing.T, prompt []int32, n int) (gen []int32, rows [][]float64) {
	t.Helper()
	m := openTiny(t, 1, 256)
	res, err := m.Generate(context.Background(), prompt, engine.GenOptions{MaxTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	gen = res.Generated
	m.Reset()
	all := append(slices.Clone(prompt), gen[:len(gen)-1]...)
	res, err = m.Generate(context.Background(), all, engine.GenOptions{MaxTokens: 1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range gen {
		rows = append(rows, logSoftmax64(res.PromptRows[len(prompt)-1+i]))
	}
	return gen, rows
}

// logSoftmax64 is row's log-softmax in float64: the reference the
// server's logprobs are checked against.
func logSoftmax64(row []float32) []float64 {
	mx := math.Inf(-1)
	for _, x := range row {
		mx = max(mx, float64(x))
	}
	s := 0.0
	for _, x := range row {
		s += math.Exp(float64(x) - mx)
	}
	lse := mx + math.Log(s)
	lp := make([]float64, len(row))
	for j, x := range row {
		lp[j] = float64(x) - lse
	}
	return lp
}

// topIDs is the ids of row's k largest values, best first (lower id first on ties).
func topIDs(row []float64, k int) []int32 {
	ids := make([]int32, len(row))
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortStableFunc(ids, func(a, b int32) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	return ids[:k]
}

// lpAt is token i's logprob (NaN for null: an echoed prompt's first).
func lpAt(c *completionLogprobs, i int) float64 {
	if p := c.TokenLogprobs[i]; p != nil {
		return *p
	}
	return math.NaN()
}

func lpValues(c *completionLogprobs) []float64 {
	out := make([]float64, len(c.TokenLogprobs))
	for i := range out {
		out[i] = lpAt(c, i)
	}
	return out
}

const lpTol = 2e-4 // float32 logits: the server's batched rows against Generate's

// TestCompletionLogprobs: /v1/completions' logprobs are the log-softmax of
// the logits each greedy token was chosen from (recomputed here from every
// row of a second pass), with the top alternatives; streamed, the chunks'
// logprobs add up to the same.
func TestCompletionLogprobs(t *testing.T) {
	_, ts := startTiny(t, 2, 256, sched.Config{})
	tok := tinyTokenizer(t)
	const prompt, n, top = "func main() {", 24, 3
	gen, rows := refLogprobs(t, tok.Encode(prompt, true), n)
	body := map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": top}
	var resp completionResponse
	if code := post(t, ts.URL+"/v1/completions", body, &resp); code != 200 {
		t.Fatalf("status %d", code)
	}
	lp := resp.Choices[0].Logprobs
	if lp == nil || len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("logprobs %+v for %d tokens", lp, n)
	}
	offset := 0
	for i, id := range gen {
		if want := tokenText(tok, id); lp.Tokens[i] != want {
			t.Errorf("token %d: %q, want %q", i, lp.Tokens[i], want)
		}
		if v := lpAt(lp, i); math.Abs(v-rows[i][id]) > lpTol || v > 0 {
			t.Errorf("token %d: logprob %g, reference %g", i, v, rows[i][id])
		}
		want := map[string]float64{tokenText(tok, id): rows[i][id]}
		for _, a := range topIDs(rows[i], top) {
			if _, dup := want[tokenText(tok, a)]; !dup {
				want[tokenText(tok, a)] = rows[i][a]
			}
		}
		if len(lp.TopLogprobs[i]) != len(want) {
			t.Errorf("token %d: top_logprobs %v, want %v", i, lp.TopLogprobs[i], want)
		}
		for k, v := range want {
			if got, ok := lp.TopLogprobs[i][k]; !ok || math.Abs(got-v) > lpTol {
				t.Errorf("token %d: top_logprobs[%q] = %g (%v), want %g", i, k, got, ok, v)
			}
		}
		if lp.TextOffset[i] != offset {
			t.Errorf("token %d: text_offset %d, want %d", i, lp.TextOffset[i], offset)
		}
		offset += utf8.RuneCountInString(lp.Tokens[i])
	}
	if strings.Join(lp.Tokens, "") != resp.Choices[0].Text {
		t.Errorf("tokens %q do not make the text %q", lp.Tokens, resp.Choices[0].Text)
	}

	// Streamed: the same records, in order, over the chunks.
	body["stream"] = true
	var got completionLogprobs
	for _, e := range streamEvents(t, ts.URL+"/v1/completions", body) {
		var c completionResponse
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		l := c.Choices[0].Logprobs
		if l == nil {
			t.Fatalf("chunk without logprobs: %s", e)
		}
		got.Tokens = append(got.Tokens, l.Tokens...)
		got.TokenLogprobs = append(got.TokenLogprobs, l.TokenLogprobs...)
		got.TextOffset = append(got.TextOffset, l.TextOffset...)
	}
	if !slices.Equal(got.Tokens, lp.Tokens) || !slices.Equal(lpValues(&got), lpValues(lp)) || !slices.Equal(got.TextOffset, lp.TextOffset) {
		t.Errorf("streamed logprobs %+v\nwhole %+v", got, lp)
	}

	// logprobs 0: the chosen tokens alone; without logprobs, null.
	body["stream"], body["logprobs"] = false, 0
	var zero completionResponse
	post(t, ts.URL+"/v1/completions", body, &zero)
	if l := zero.Choices[0].Logprobs; l == nil || len(l.Tokens) != n || len(l.TopLogprobs[0]) != 1 || zero.Choices[0].Text != resp.Choices[0].Text {
		t.Errorf("logprobs 0: %+v", l)
	}
	delete(body, "logprobs")
	var raw map[string]any
	post(t, ts.URL+"/v1/completions", body, &raw)
	if c := raw["choices"].([]any)[0].(map[string]any); c["logprobs"] != nil {
		t.Errorf("logprobs without asking: %v", c["logprobs"])
	}
}

// TestChatLogprobs: a chat reply's logprobs cover every generated token
// (the reasoning and the end of turn too) with their bytes, whole and
// streamed, and asking for them changes neither greedy nor seeded text.
func TestChatLogprobs(t *testing.T) {
	_, ts := startTiny(t, 2, 512, sched.Config{})
	tok := tinyTokenizer(t)
	body := map[string]any{"max_tokens": 30, "temperature": 0, "logprobs": true, "top_logprobs": 2,
		"messages": []map[string]any{{"role": "user", "content": "Write a Go function."}}}
	var resp chatResponse
	if code := post(t, ts.URL+"/v1/chat/completions", body, &resp); code != 200 {
		t.Fatalf("status %d", code)
	}
	c := resp.Choices[0]
	if c.Logprobs == nil || len(c.Logprobs.Content) != resp.Usage.CompletionTokens {
		t.Fatalf("logprobs %+v for %d tokens", c.Logprobs, resp.Usage.CompletionTokens)
	}
	var text strings.Builder
	for i, e := range c.Logprobs.Content {
		if len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob ||
			e.TopLogprobs[1].Logprob > e.Logprob || e.Logprob > 0 {
			t.Errorf("token %d: greedy %+v is not the first of its top_logprobs", i, e)
		}
		b := make([]byte, len(e.Bytes))
		for k, x := range e.Bytes {
			b[k] = byte(x)
		}
		if id, ok := tok.ID(e.Token); ok && string(tok.TokenBytes(id)) != string(b) {
			t.Errorf("token %d: %q has bytes %v", i, e.Token, e.Bytes)
		}
		text.Write(b)
	}
	msg := c.Message
	if r := text.String(); msg.ReasoningContent == nil || !strings.Contains(r, *msg.ReasoningContent) {
		t.Errorf("the tokens' bytes %q do not hold the reasoning %v", r, msg.ReasoningContent)
	}

	body["stream"] = true
	var streamed []chatTokenLogprob
	for _, e := range streamEvents(t, ts.URL+"/v1/chat/completions", body) {
		var ch chatResponse
		if e == "[DONE]" || json.Unmarshal([]byte(e), &ch) != nil || len(ch.Choices) == 0 || ch.Choices[0].Logprobs == nil {
			continue
		}
		streamed = append(streamed, ch.Choices[0].Logprobs.Content...)
	}
	if len(streamed) != len(c.Logprobs.Content) {
		t.Fatalf("streamed %d records, whole %d", len(streamed), len(c.Logprobs.Content))
	}
	for i := range streamed {
		if a, b := streamed[i], c.Logprobs.Content[i]; a.Token != b.Token || a.Logprob != b.Logprob {
			t.Errorf("record %d: streamed %+v, whole %+v", i, a, b)
		}
	}

	// The same answers without logprobs: greedy (the backend's argmax) and
	// seeded sampling.
	for _, temp := range []float64{0, 0.8} {
		with := map[string]any{"max_tokens": 30, "temperature": temp, "seed": 11, "logprobs": true,
			"messages": []map[string]any{{"role": "user", "content": "Write a Go function."}}}
		without := map[string]any{"max_tokens": 30, "temperature": temp, "seed": 11,
			"messages": []map[string]any{{"role": "user", "content": "Write a Go function."}}}
		var a, b chatResponse
		post(t, ts.URL+"/v1/chat/completions", with, &a)
		post(t, ts.URL+"/v1/chat/completions", without, &b)
		ma, mb := a.Choices[0].Message, b.Choices[0].Message
		if ja, jb := mustJSON(t, ma), mustJSON(t, mb); ja != jb || b.Choices[0].Logprobs != nil || a.Choices[0].Logprobs == nil {
			t.Errorf("temperature %g: with logprobs %s, without %s", temp, ja, jb)
		}
		if n := len(a.Choices[0].Logprobs.Content); n != a.Usage.CompletionTokens || len(a.Choices[0].Logprobs.Content[0].TopLogprobs) != 0 {
			t.Errorf("temperature %g: %d records for %d tokens", temp, n, a.Usage.CompletionTokens)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPenaltiesReachTheSampler: with frequency and presence penalties each
// greedy token is the best of its step's top alternatives after the
// penalties of the tokens generated before it (logprobs report the logits
// before them), and the penalties change the text.
func TestPenaltiesReachTheSampler(t *testing.T) {
	_, ts := startTiny(t, 1, 256, sched.Config{})
	const pres, freq = 0.5, 1.5
	// The prompt holds the first greedy token ("\tif"); the
	// penalties count generated tokens only, so that token stays first.
	body := map[string]any{"prompt": "func main() {\n\tx := 1\n\tif x {\n\t\treturn\n\t}\n", "max_tokens": 48, "temperature": 0, "logprobs": 5,
		"presence_penalty": pres, "frequency_penalty": freq}
	var pen, plain completionResponse
	post(t, ts.URL+"/v1/completions", body, &pen)
	delete(body, "presence_penalty")
	delete(body, "frequency_penalty")
	post(t, ts.URL+"/v1/completions", body, &plain)
	if pen.Choices[0].Text == plain.Choices[0].Text {
		t.Fatalf("the penalties changed nothing: %q", pen.Choices[0].Text)
	}
	lp := pen.Choices[0].Logprobs
	if first := lp.Tokens[0]; !strings.Contains(body["prompt"].(string), first) {
		t.Errorf("the first token %q is not in the prompt: the test no longer checks that the prompt is not penalised", first)
	}
	counts := map[string]int{}
	moved := 0
	for i, chosen := range lp.Tokens {
		score := func(tok string, lp float64) float64 {
			if c := counts[tok]; c > 0 {
				return lp - pres - freq*float64(c)
			}
			return lp
		}
		best, bestTok := math.Inf(-1), ""
		for tok, v := range lp.TopLogprobs[i] {
			if s := score(tok, v); s > best {
				best, bestTok = s, tok
			}
		}
		if s := score(chosen, lpAt(lp, i)); s < best-1e-4 {
			t.Errorf("token %d %q scores %g after the penalties; %q scores %g", i, chosen, s, bestTok, best)
		}
		for tok, v := range lp.TopLogprobs[i] {
			if v > lpAt(lp, i)+1e-6 && tok != chosen {
				moved++ // a more likely token lost to the penalties
				break
			}
		}
		counts[chosen]++
	}
	if moved == 0 {
		t.Errorf("no step chose below the most likely token: %q", pen.Choices[0].Text)
	}
}

func TestJSONLogprob(t *testing.T) {
	if jsonLogprob(math.Inf(-1)) != minLogprob || jsonLogprob(-1e6) != minLogprob || jsonLogprob(-0.5) != -0.5 {
		t.Error("jsonLogprob does not clamp at minLogprob")
	}
}

func TestLogprobsParams(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want int
		ok   bool
	}{{"", -1, true}, {"null", -1, true}, {"false", -1, true}, {"0", 0, true}, {"5", 5, true}, {"20", 20, true},
		{"21", 0, false}, {"-1", 0, false}, {"true", 0, false}, {"2.5", 0, false}, {`"3"`, 0, false}} {
		got, err := completionLogprobsParam(json.RawMessage(tc.raw))
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("completions logprobs %s: %d, %v", tc.raw, got, err)
		}
	}
	two, big, zero := 2, 21, 0
	for _, tc := range []struct {
		raw   string
		top   *int
		want  int
		param string
	}{{"", nil, -1, ""}, {"false", nil, -1, ""}, {"false", &zero, -1, ""}, {"true", nil, 0, ""}, {"true", &two, 2, ""},
		{"false", &two, 0, "top_logprobs"}, {"true", &big, 0, "top_logprobs"}, {"1", nil, 0, "logprobs"}, {`"yes"`, nil, 0, "logprobs"}} {
		got, param, err := chatLogprobsParam(json.RawMessage(tc.raw), tc.top)
		if param != tc.param || (err == nil) != (tc.param == "") || (err == nil && got != tc.want) {
			t.Errorf("chat logprobs %s top %v: %d, %q, %v", tc.raw, tc.top, got, param, err)
		}
	}
}

// TestLogprobsAtTheEnd: records of tokens that end a reply without text of
// their own (the end-of-turn token; the one that completes a stop string)
// still come back, in the last chunk when streamed.
func TestLogprobsAtTheEnd(t *testing.T) {
	_, ts := startScripted(t, 1, "Sure.</think>Done.", nil, sched.Config{})
	body := map[string]any{"max_tokens": 40, "logprobs": true, "messages": []map[string]any{{"role": "user", "content": "x"}}}
	var whole chatResponse
	post(t, ts.URL+"/v1/chat/completions", body, &whole)
	recs := whole.Choices[0].Logprobs.Content
	if n := whole.Usage.CompletionTokens; len(recs) != n || recs[n-1].Token != "</assistant>" {
		t.Fatalf("%d records for %d tokens: %+v", len(recs), n, recs)
	}
	body["stream"] = true
	var streamed []chatTokenLogprob
	for _, e := range streamEvents(t, ts.URL+"/v1/chat/completions", body) {
		var ch chatResponse
		if json.Unmarshal([]byte(e), &ch) == nil && len(ch.Choices) > 0 && ch.Choices[0].Logprobs != nil {
			streamed = append(streamed, ch.Choices[0].Logprobs.Content...)
		}
	}
	if len(streamed) != len(recs) || streamed[len(streamed)-1].Token != "</assistant>" {
		t.Errorf("streamed %d records, whole %d", len(streamed), len(recs))
	}

	// A stop string that begins a token: its record comes back, its text does not.
	cbody := map[string]any{"prompt": "x", "max_tokens": 40, "logprobs": 1, "stop": "Done"}
	var c completionResponse
	post(t, ts.URL+"/v1/completions", cbody, &c)
	toks := c.Choices[0].Logprobs.Tokens
	if len(toks) == 0 || !strings.HasPrefix(toks[len(toks)-1], "Done") || strings.Contains(c.Choices[0].Text, "Done") {
		t.Fatalf("stop at %q: text %q, tokens %q", "Done", c.Choices[0].Text, toks)
	}
	cbody["stream"] = true
	var got []string
	for _, e := range streamEvents(t, ts.URL+"/v1/completions", cbody) {
		var ch completionResponse
		if json.Unmarshal([]byte(e), &ch) == nil && len(ch.Choices) > 0 && ch.Choices[0].Logprobs != nil {
			got = append(got, ch.Choices[0].Logprobs.Tokens...)
		}
	}
	if !slices.Equal(got, toks) {
		t.Errorf("streamed tokens %q, whole %q", got, toks)
	}
}

// TestLogitBias: -100 bans the greedy token (which logprobs, taken before
// the bias, still rank first), 100 forces a token at every step.
func TestLogitBias(t *testing.T) {
	_, ts := startTiny(t, 1, 256, sched.Config{})
	tok := tinyTokenizer(t)
	body := map[string]any{"prompt": "func main() {", "max_tokens": 8, "temperature": 0, "logprobs": 1}
	var plain, banned, forced completionResponse
	post(t, ts.URL+"/v1/completions", body, &plain)
	first := plain.Choices[0].Logprobs.Tokens[0]
	id, ok := int32(0), false
	for i := int32(0); i < int32(tok.VocabSize()); i++ {
		if tokenText(tok, i) == first {
			id, ok = i, true
			break
		}
	}
	if !ok {
		t.Fatalf("no id for %q", first)
	}
	body["logit_bias"] = map[string]any{fmt.Sprint(id): -100}
	post(t, ts.URL+"/v1/completions", body, &banned)
	lp := banned.Choices[0].Logprobs
	if lp.Tokens[0] == first || lp.TopLogprobs[0][first] <= lpAt(lp, 0) {
		t.Errorf("banned %q (id %d): first token %q, top %v", first, id, lp.Tokens[0], lp.TopLogprobs[0])
	}
	x, _ := tok.ID("x")
	body["logit_bias"] = map[string]any{fmt.Sprint(x): 100}
	delete(body, "logprobs") // the bias alone must bring in a sampler
	post(t, ts.URL+"/v1/completions", body, &forced)
	if got := forced.Choices[0].Text; got != strings.Repeat("x", 8) {
		t.Errorf("forced %q (id %d): %q", "x", x, got)
	}
}
