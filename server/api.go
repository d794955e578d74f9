package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The OpenAI request and response shapes lagc serves. Fields a client may
// send that lagc does not use are ignored, as OpenAI-compatible servers do;
// those that would change the result and are not supported are refused.

// samplingParams are the generation fields common to both endpoints.
type samplingParams struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	Seed                *int64          `json:"seed"`
	Stop                stopList        `json:"stop"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Logprobs            json.RawMessage `json:"logprobs"`
	Echo                bool            `json:"echo"`
	BestOf              *int            `json:"best_of"`
	Suffix              *string         `json:"suffix"`
	LogitBias           map[string]any  `json:"logit_bias"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// stopList is "stop": a string or an array of strings.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop: expected a string or an array of strings")
	}
	*s = many
	return nil
}

const maxStops = 16

// maxChoices bounds n (OpenAI's own bound); the server's slots and queue
// may bound it further.
const maxChoices = 128

// check validates the fields lagc supports and refuses the others; it
// returns the parameter at fault with the error.
func (p *samplingParams) check() (param string, err error) {
	inRange := func(name string, v *float64, lo, hi float64) error {
		if v != nil && !(*v >= lo && *v <= hi) {
			return fmt.Errorf("%s must be in [%g, %g], got %g", name, lo, hi, *v)
		}
		return nil
	}
	for _, c := range []struct {
		name   string
		v      *float64
		lo, hi float64
	}{{"temperature", p.Temperature, 0, 2}, {"top_p", p.TopP, 0, 1}, {"min_p", p.MinP, 0, 1},
		{"repetition_penalty", p.RepetitionPenalty, math.SmallestNonzeroFloat64, 10},
		{"presence_penalty", p.PresencePenalty, -2, 2}, {"frequency_penalty", p.FrequencyPenalty, -2, 2}} {
		if err := inRange(c.name, c.v, c.lo, c.hi); err != nil {
			return c.name, err
		}
	}
	if p.TopP != nil && *p.TopP == 0 {
		return "top_p", fmt.Errorf("top_p must be in (0, 1], got 0")
	}
	if p.TopK != nil && *p.TopK < -1 {
		return "top_k", fmt.Errorf("top_k must be -1 (off), 0 (off) or positive, got %d", *p.TopK)
	}
	if p.MaxTokens != nil && p.MaxCompletionTokens != nil && *p.MaxTokens != *p.MaxCompletionTokens {
		return "max_tokens", fmt.Errorf("max_tokens (%d) and max_completion_tokens (%d) disagree", *p.MaxTokens, *p.MaxCompletionTokens)
	}
	if n := p.maxTokens(); n != nil && (*n < 0 || (*n == 0 && !p.Echo)) {
		return "max_tokens", fmt.Errorf("max_tokens must be at least 1 (0 only with echo, to score the prompt), got %d", *n)
	}
	n := 1
	if p.N != nil {
		n = *p.N
	}
	if n < 1 || n > maxChoices {
		return "n", fmt.Errorf("n must be in [1, %d], got %d", maxChoices, n)
	}
	if p.BestOf != nil && *p.BestOf != n {
		return "best_of", fmt.Errorf("best_of must equal n (%d): lagc returns every choice it generates, got %d", n, *p.BestOf)
	}
	if _, err := p.logitBias(); err != nil {
		return "logit_bias", err
	}
	if p.Suffix != nil && *p.Suffix != "" {
		return "suffix", fmt.Errorf("suffix is not supported")
	}
	if len(p.Stop) > maxStops {
		return "stop", fmt.Errorf("at most %d stop strings, got %d", maxStops, len(p.Stop))
	}
	for i, s := range p.Stop {
		if s == "" {
			return "stop", fmt.Errorf("stop string %d is empty", i)
		}
	}
	return "", nil
}

// maxLogitBias bounds logit_bias's entries (OpenAI states no bound; each
// costs the sampler an add a step).
const maxLogitBias = 1024

// logitBias reads logit_bias: token ids (as strings, JSON object keys) to
// biases in [-100, 100]. The ids are checked against the vocabulary later.
func (p *samplingParams) logitBias() (map[int32]float64, error) {
	if len(p.LogitBias) == 0 {
		return nil, nil
	}
	if len(p.LogitBias) > maxLogitBias {
		return nil, fmt.Errorf("logit_bias has %d entries; at most %d", len(p.LogitBias), maxLogitBias)
	}
	out := make(map[int32]float64, len(p.LogitBias))
	for k, v := range p.LogitBias {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("logit_bias: key %q is not a token id", k)
		}
		b, ok := v.(float64)
		if !ok || !(b >= -100 && b <= 100) {
			return nil, fmt.Errorf("logit_bias[%q]: expected a number in [-100, 100], got %v", k, v)
		}
		out[int32(id)] = b
	}
	return out, nil
}

func (p *samplingParams) maxTokens() *int {
	if p.MaxCompletionTokens != nil {
		return p.MaxCompletionTokens
	}
	return p.MaxTokens
}

// chatRequest is a POST /v1/chat/completions body.
type chatRequest struct {
	samplingParams
	TopLogprobs        *int              `json:"top_logprobs"`
	Messages           []chatMessage     `json:"messages"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
	ResponseFormat     *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

// chatMessage is a message as OpenAI clients send it: content is a string,
// null or an array of parts; tool call arguments are a JSON string.
type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Name             string          `json:"name"`
	ToolCalls        []toolCall      `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
}

// text returns the message content as one string: text parts are joined.
func (m *chatMessage) text() (string, error) {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(c, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", fmt.Errorf("content: expected a string or an array of parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part %d has type %q: this model reads only text", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// toolCall is an assistant's call in OpenAI's shape.
type toolCall struct {
	Index    *int   `json:"index,omitempty"` // in stream deltas only
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"` // a JSON object, as a string
	} `json:"function"`
}

// completionRequest is a POST /v1/completions body.
type completionRequest struct {
	samplingParams
	Prompt json.RawMessage `json:"prompt"`
}

type usage struct {
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	TotalTokens      int           `json:"total_tokens"`
	PromptDetails    *promptDetail `json:"prompt_tokens_details,omitempty"`
}

type promptDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *replyMsg     `json:"message,omitempty"`
	Delta        *replyMsg     `json:"delta,omitempty"`
	FinishReason *string       `json:"finish_reason"`
	Logprobs     *chatLogprobs `json:"logprobs"`
}

// replyMsg is the assistant's message (or, streaming, a delta of it).
type replyMsg struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	FinishReason *string             `json:"finish_reason"`
	Logprobs     *completionLogprobs `json:"logprobs"`
}

// apiError is OpenAI's error body.
type apiError struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
