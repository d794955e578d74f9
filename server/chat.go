package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"lagc/chat"
)

// chatJob is a rendered chat request.
type chatJob struct {
	*job
	inReasoning bool // the prompt ends inside <think>
	parseCalls  bool
	schemas     map[string]map[string]string
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	cj, err := s.prepareChat(&req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sts, err := s.start(r.Context(), cj.job)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n := len(sts)
	id, created := newID("chatcmpl-"), time.Now().Unix()
	resp := func(choice chatChoice) chatResponse {
		obj := "chat.completion"
		if req.Stream {
			obj = "chat.completion.chunk"
		}
		return chatResponse{ID: id, Object: obj, Created: created, Model: s.cfg.Name, Choices: []chatChoice{choice}}
	}
	// Each choice parses its own reply and numbers its own tool calls.
	type choiceState struct {
		parser *replyParser
		calls  int
		recs   []tokenLogprob // with logprobs: read, not yet sent
	}
	states := make([]choiceState, n)
	for c := range states {
		states[c].parser = newReplyParser(cj.inReasoning, cj.parseCalls, cj.schemas)
	}
	toCalls := func(c int, pc []parsedCall) []toolCall {
		var out []toolCall
		for _, p := range pc {
			tc := toolCall{ID: newID("call_"), Type: "function"}
			tc.Function.Name, tc.Function.Arguments = p.Name, p.Arguments
			if req.Stream {
				tc.Index = ptr(states[c].calls)
			}
			states[c].calls++
			out = append(out, tc)
		}
		return out
	}
	finishOf := func(c int, o outcome) string {
		if states[c].calls > 0 && o.finish == "stop" {
			return "tool_calls"
		}
		return o.finish
	}
	outs := make([]outcome, n)

	if !req.Stream {
		reasoning, content := make([]strings.Builder, n), make([]strings.Builder, n)
		tcs := make([][]toolCall, n)
		add := func(c int, d replyDelta) {
			reasoning[c].WriteString(d.Reasoning)
			content[c].WriteString(d.Content)
			tcs[c] = append(tcs[c], toCalls(c, d.Calls)...)
		}
		err := eachChoice(r.Context(), n, func(ctx context.Context, c int) error {
			var err error
			outs[c], err = s.consume(ctx, sts[c], cj.job, c, func(text string, lp []tokenLogprob) error {
				add(c, states[c].parser.Add(text))
				states[c].recs = append(states[c].recs, lp...)
				return nil
			})
			return err
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		whole := resp(chatChoice{})
		whole.Choices, whole.Usage = nil, usageOf(cj.job, outs)
		for c := range n {
			add(c, states[c].parser.Finish())
			msg := &replyMsg{Role: "assistant", ToolCalls: tcs[c]}
			if content[c].Len() > 0 || len(tcs[c]) == 0 {
				msg.Content = ptr(content[c].String())
			}
			if reasoning[c].Len() > 0 {
				msg.ReasoningContent = ptr(reasoning[c].String())
			}
			ch := chatChoice{Index: c, Message: msg, FinishReason: ptr(finishOf(c, outs[c]))}
			if cj.withLogprobs() {
				ch.Logprobs = chatLogprobsOf(s.cfg.Tokenizer, append(states[c].recs, outs[c].logprobs...))
			}
			whole.Choices = append(whole.Choices, ch)
		}
		writeJSON(w, http.StatusOK, whole)
		return
	}

	ev := startSSE(w)
	// With logprobs, the records of the tokens read so far go with the
	// choice's next chunk (the parser may hold text back, as around a tag).
	chunk := func(c int, ch chatChoice) chatResponse {
		ch.Index = c
		if cj.withLogprobs() {
			ch.Logprobs = chatLogprobsOf(s.cfg.Tokenizer, states[c].recs)
			states[c].recs = nil
		}
		return resp(ch)
	}
	send := func(c int, d replyDelta) error {
		if d.Reasoning != "" {
			if err := ev.send(chunk(c, chatChoice{Delta: &replyMsg{ReasoningContent: ptr(d.Reasoning)}})); err != nil {
				return err
			}
		}
		if d.Content != "" {
			if err := ev.send(chunk(c, chatChoice{Delta: &replyMsg{Content: ptr(d.Content)}})); err != nil {
				return err
			}
		}
		if len(d.Calls) > 0 {
			return ev.send(chunk(c, chatChoice{Delta: &replyMsg{ToolCalls: toCalls(c, d.Calls)}}))
		}
		return nil
	}
	for c := range n {
		if err := ev.send(resp(chatChoice{Index: c, Delta: &replyMsg{Role: "assistant", Content: ptr("")}})); err != nil {
			for _, st := range sts {
				st.Cancel()
			}
			return
		}
	}
	err = eachChoice(r.Context(), n, func(ctx context.Context, c int) error {
		o, err := s.consume(ctx, sts[c], cj.job, c, func(text string, lp []tokenLogprob) error {
			states[c].recs = append(states[c].recs, lp...)
			return send(c, states[c].parser.Add(text))
		})
		outs[c] = o
		states[c].recs = append(states[c].recs, o.logprobs...)
		if err == nil {
			err = send(c, states[c].parser.Finish())
		}
		if err == nil {
			err = ev.send(chunk(c, chatChoice{Delta: &replyMsg{}, FinishReason: ptr(finishOf(c, o))}))
		}
		return err
	})
	if err == nil && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := resp(chatChoice{})
		u.Choices, u.Usage = []chatChoice{}, usageOf(cj.job, outs)
		err = ev.send(u)
	}
	ev.end(err)
}

// prepareChat validates a chat request, renders its prompt and builds its
// job.
func (s *Server) prepareChat(req *chatRequest) (*chatJob, error) {
	if s.cfg.Template == nil {
		return nil, badRequest("messages", "this model has no chat template: use /v1/completions")
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	cj := &chatJob{parseCalls: len(req.Tools) > 0}
	switch tc := string(bytes.TrimSpace(req.ToolChoice)); tc {
	case "", "null", `"auto"`:
	case `"none"`:
		cj.parseCalls = false
	default:
		return nil, badRequest("tool_choice", "tool_choice %s is not supported: expected \"auto\" or \"none\"", tc)
	}
	if req.Echo {
		return nil, badRequest("echo", "echo is for /v1/completions")
	}
	if rf := req.ResponseFormat; rf != nil && rf.Type != "" && rf.Type != "text" {
		return nil, badRequest("response_format", "response_format %q is not supported: expected \"text\"", rf.Type)
	}
	nlp, param, err := chatLogprobsParam(req.Logprobs, req.TopLogprobs)
	if err != nil {
		return nil, badRequest(param, "%v", err)
	}
	if cj.schemas, err = toolSchemas(req.Tools); err != nil {
		return nil, badRequest("tools", "%v", err)
	}
	text, err := s.renderChat(req.Messages, req.Tools, req.ChatTemplateKwargs, true)
	if err != nil {
		return nil, err
	}
	cj.inReasoning = endsInsideThink(text)
	// The template writes its own special tokens (Laguna's leading 〈|EOS|〉).
	ids := s.cfg.Tokenizer.Encode(text, false)
	if cj.job, err = s.newJob(&req.samplingParams, ids, "messages", nlp); err != nil {
		return nil, err
	}
	return cj, nil
}

// renderChat renders messages (and tools) with the checkpoint's template.
func (s *Server) renderChat(messages []chatMessage, tools []json.RawMessage, vars map[string]any, generationPrompt bool) (string, error) {
	if s.cfg.Template == nil {
		return "", badRequest("messages", "this model has no chat template: use /v1/completions")
	}
	msgs := make([]chat.Message, len(messages))
	for i, m := range messages {
		var err error
		if msgs[i], err = toTemplateMessage(m); err != nil {
			return "", badRequest(fmt.Sprintf("messages[%d]", i), "messages[%d]: %v", i, err)
		}
	}
	tmpl := s.cfg.Template
	opt := chat.Options{AddGenerationPrompt: generationPrompt, SpecialTokens: s.cfg.SpecialTokens, Vars: vars}
	if len(tools) > 0 {
		opt.Tools = tools
		if s.cfg.ToolTemplate != nil {
			tmpl = s.cfg.ToolTemplate
		}
	}
	text, err := tmpl.Render(msgs, opt)
	if err != nil {
		return "", badRequest("messages", "%v", err)
	}
	return text, nil
}

// toTemplateMessage turns an OpenAI message into the template's shape:
// content as one string, tool call arguments as a JSON object.
func toTemplateMessage(m chatMessage) (chat.Message, error) {
	switch m.Role {
	case "system", "user", "assistant", "tool":
	case "developer":
		m.Role = "system"
	default:
		return chat.Message{}, fmt.Errorf("role %q: expected system, developer, user, assistant or tool", m.Role)
	}
	text, err := m.text()
	if err != nil {
		return chat.Message{}, err
	}
	out := chat.Message{Role: m.Role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID}
	if m.ReasoningContent != nil {
		out.ReasoningContent = *m.ReasoningContent
	}
	for k, tc := range m.ToolCalls {
		args := strings.TrimSpace(tc.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
			return chat.Message{}, fmt.Errorf("tool_calls[%d].function.arguments: expected a JSON object as a string, got %q", k, tc.Function.Arguments)
		}
		if tc.Function.Name == "" {
			return chat.Message{}, fmt.Errorf("tool_calls[%d].function.name is empty", k)
		}
		out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: tc.ID, Type: "function",
			Function: chat.FunctionCall{Name: tc.Function.Name, Arguments: json.RawMessage(args)}})
	}
	return out, nil
}

// endsInsideThink reports whether a rendered prompt leaves the model inside
// a <think> block (Laguna's generation prompt with thinking on).
func endsInsideThink(prompt string) bool {
	return strings.LastIndex(prompt, thinkOpen) > strings.LastIndex(prompt, thinkClose)
}
