// Package chat renders a checkpoint's chat template (Jinja, as shipped in
// chat_template.jinja, tokenizer_config.json or GGUF tokenizer.chat_template)
// the way transformers' apply_chat_template does, with lagc/internal/jinja:
// a fork of github.com/ardanlabs/jinja, a pure-Go engine written for LLM chat
// templates that applies HF's trim_blocks/lstrip_blocks defaults and keeps
// dict key order (so tojson of tool schemas matches Python byte for byte).
//
// A template comes with a downloaded checkpoint and is untrusted: the fork
// adds limits on steps, allocation, output, call depth and nesting, and
// renders stop when their context is done (see Limits).
//
// Known differences from Python's Jinja2, from the engine: floats print in
// Go's shortest form (1.0 renders as "1", 123456789.0 as "1.23456789e+08"),
// and some Python errors (division by zero, unpacking a dict in a for loop)
// do not happen. Integers, strings, booleans, null and nesting match.
package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"lagc/internal/jinja"
)

// Template is a compiled chat template, safe for concurrent use.
type Template struct {
	tmpl   *jinja.Template
	Source string
}

// MaxTemplateBytes bounds a chat template's source (real ones are a few
// kilobytes).
const MaxTemplateBytes = 1 << 20

// Compile parses a chat template.
func Compile(src string) (tmpl *Template, err error) {
	defer recoverTo(&err, "compile chat template")
	if len(src) > MaxTemplateBytes {
		return nil, fmt.Errorf("compile chat template: %d bytes, more than the %d a chat template may have", len(src), MaxTemplateBytes)
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("compile chat template: %w", err)
	}
	return &Template{tmpl: t, Source: src}, nil
}

// Message is one conversation turn in the OpenAI/HF shape templates expect.
type Message struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// ToolCall is an assistant's call of a tool.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments: a JSON object, which
// templates usually iterate with .items() (key order is kept).
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Options are the other variables apply_chat_template passes.
type Options struct {
	AddGenerationPrompt bool
	// Tools are tool definitions as JSON objects ({"type": "function",
	// "function": {...}}); nil renders as None, like tools=None.
	Tools []json.RawMessage
	// SpecialTokens are bos_token, eos_token, pad_token, unk_token, ... as
	// transformers passes them from the tokenizer's special-tokens map.
	SpecialTokens map[string]string
	// Vars are further template keyword arguments, e.g. "enable_thinking":
	// false. Values are converted through JSON.
	Vars map[string]any
	// Limits bound the render; zero fields take DefaultLimits' values for
	// the size of the conversation.
	Limits Limits
}

// Limits bound one render: evaluation steps, bytes allocated, bytes of
// output, nested macro calls and nested evaluation.
type Limits = jinja.Limits

// DefaultLimits are the limits for rendering inputBytes of messages, tools
// and variables: the engine's defaults (20M steps, about a second; 256 MiB
// allocated; 64 MiB of output; 256 nested calls) grown with the input, so a
// long conversation renders and a hostile template stops early.
func DefaultLimits(inputBytes int) Limits {
	l := jinja.DefaultLimits()
	n := int64(inputBytes)
	l.Steps += n
	l.Alloc += 32 * n
	l.Output += 4 * n
	return l
}

// Render renders a conversation.
func (t *Template) Render(msgs []Message, opt Options) (string, error) {
	return t.RenderContext(context.Background(), msgs, opt)
}

// RenderContext renders a conversation, stopping with ctx's error when ctx
// is done.
func (t *Template) RenderContext(ctx context.Context, msgs []Message, opt Options) (string, error) {
	raw, err := json.Marshal(msgs)
	if err != nil {
		return "", fmt.Errorf("chat messages: %w", err)
	}
	return t.RenderJSONContext(ctx, raw, opt)
}

// RenderJSON renders a conversation given as a JSON array of message
// objects, which may carry fields Message lacks; key order is kept.
func (t *Template) RenderJSON(messages json.RawMessage, opt Options) (string, error) {
	return t.RenderJSONContext(context.Background(), messages, opt)
}

// RenderJSONContext is RenderJSON stopping with ctx's error when ctx is done.
func (t *Template) RenderJSONContext(ctx context.Context, messages json.RawMessage, opt Options) (string, error) {
	input := len(messages)
	msgs, err := FromJSON(messages)
	if err != nil {
		return "", fmt.Errorf("chat messages: %w", err)
	}
	if !msgs.IsList() {
		return "", fmt.Errorf("chat messages: want a JSON array")
	}
	data := map[string]jinja.Value{
		"messages":              msgs,
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(opt.AddGenerationPrompt),
	}
	for k, v := range opt.SpecialTokens {
		data[k] = jinja.NewString(v)
		input += len(v)
	}
	for k, v := range opt.Vars {
		raw, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("chat template variable %q: %w", k, err)
		}
		if data[k], err = FromJSON(raw); err != nil {
			return "", fmt.Errorf("chat template variable %q: %w", k, err)
		}
		input += len(raw)
	}
	if opt.Tools != nil {
		items := make([]jinja.Value, len(opt.Tools))
		for i, raw := range opt.Tools {
			v, err := FromJSON(raw)
			if err != nil {
				return "", fmt.Errorf("chat tool %d: %w", i, err)
			}
			items[i] = v
			input += len(raw)
		}
		data["tools"] = jinja.NewList(items)
	}
	lim := DefaultLimits(input)
	if opt.Limits.Steps > 0 {
		lim.Steps = opt.Limits.Steps
	}
	if opt.Limits.Alloc > 0 {
		lim.Alloc = opt.Limits.Alloc
	}
	if opt.Limits.Output > 0 {
		lim.Output = opt.Limits.Output
	}
	if opt.Limits.Calls > 0 {
		lim.Calls = opt.Limits.Calls
	}
	if opt.Limits.Nesting > 0 {
		lim.Nesting = opt.Limits.Nesting
	}
	return t.render(ctx, data, lim)
}

func (t *Template) render(ctx context.Context, data map[string]jinja.Value, lim Limits) (out string, err error) {
	defer recoverTo(&err, "render chat template")
	out, err = t.tmpl.RenderContext(ctx, data, lim)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", shortError{err})
	}
	return out, nil
}

// shortError cuts an error's message (raise_exception may carry a huge
// one) to maxErrorBytes, keeping it for errors.Is and errors.As.
type shortError struct{ err error }

const maxErrorBytes = 1000

func (e shortError) Error() string {
	s := e.err.Error()
	if len(s) > maxErrorBytes {
		return s[:maxErrorBytes] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

func (e shortError) Unwrap() error { return e.err }

// recoverTo turns a panic inside the template engine (a template shipped
// with a checkpoint is user input) into an error.
func recoverTo(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: template engine failed: %v", what, r)
	}
}

// FromJSON converts JSON to a template value, keeping object key order
// (Python dicts are ordered, and tojson output depends on it). Integers stay
// integers, as json.loads keeps them.
func FromJSON(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

const maxDepth = 256

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := x.Float64()
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("number %s: %w", x, err)
		}
		return jinja.NewFloat(f), nil
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}
