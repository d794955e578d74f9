package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"lagc/internal/stopseq"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Laguna's reply markup: reasoning inside <think>...</think> (the generation
// prompt opens it), then the answer, then tool calls written as
// <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>,
// where V is a string as is and any other value as JSON.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
	callOpen   = "<tool_call>"
	callClose  = "</tool_call>"
	argKey     = "<arg_key>"
	argKeyEnd  = "</arg_key>"
	argVal     = "<arg_value>"
	argValEnd  = "</arg_value>"
)

// replyDelta is what a piece of reply text adds to the message.
type replyDelta struct {
	Reasoning, Content string
	Calls              []parsedCall
}

// parsedCall is one tool call: the function's name and its arguments as a
// JSON object.
type parsedCall struct {
	Name      string
	Arguments string
}

// replyParser splits a chat reply into reasoning, content and tool calls as
// its text streams in. Text that may be the start of a marker is held back
// until it is decided, so no marker ever reaches the client in pieces.
type replyParser struct {
	reasoning bool // inside <think>
	calls     bool // parse tool calls (tools were given and tool_choice is not none)
	inCall    bool
	pending   string
	schemas   map[string]map[string]string // function -> argument -> JSON schema type
	started   bool                         // content or calls have begun
	segStart  bool                         // at the start of a content segment
	scanned   int                          // bytes of a pending call searched for its end
}

// newReplyParser starts a parser; inReasoning says the prompt ended inside
// <think>.
func newReplyParser(inReasoning, calls bool, schemas map[string]map[string]string) *replyParser {
	return &replyParser{reasoning: inReasoning, calls: calls, schemas: schemas, segStart: true}
}

// Add consumes more reply text.
func (p *replyParser) Add(text string) replyDelta {
	p.pending += text
	return p.drain(false)
}

// Finish returns what is held back. An unfinished tool call is returned as
// content, as written.
func (p *replyParser) Finish() replyDelta {
	return p.drain(true)
}

func (p *replyParser) drain(final bool) replyDelta {
	var d replyDelta
	for {
		switch {
		case p.reasoning:
			i := strings.Index(p.pending, thinkClose)
			if i < 0 {
				n := len(p.pending)
				if !final {
					n -= stopseq.Partial(p.pending, []string{thinkClose})
				}
				d.Reasoning += p.pending[:n]
				p.pending = p.pending[n:]
				return d
			}
			d.Reasoning += p.pending[:i]
			p.pending = p.pending[i+len(thinkClose):]
			p.reasoning, p.segStart = false, true
		case p.inCall:
			// A call is buffered whole: search only the text added since.
			from := max(0, p.scanned-len(callClose)+1)
			i := strings.Index(p.pending[from:], callClose)
			if i < 0 {
				p.scanned = len(p.pending)
				if final {
					d.Content += callOpen + p.pending
					p.pending, p.inCall = "", false
				}
				return d
			}
			i += from
			body := p.pending[:i]
			p.pending = p.pending[i+len(callClose):]
			p.inCall, p.scanned = false, 0
			if c, err := parseCall(body, p.schemas); err == nil {
				d.Calls = append(d.Calls, c)
				p.segStart = true
			} else {
				d.Content += callOpen + body + callClose // kept as text: nothing is lost
				p.segStart = false
			}
		default:
			markers := []string{}
			if p.calls {
				markers = append(markers, callOpen)
			}
			if !p.started {
				// A model may open its reasoning itself when the prompt did not.
				markers = append(markers, thinkOpen)
			}
			i, m := stopseq.First(p.pending, markers)
			if i < 0 {
				n := len(p.pending)
				if !final {
					n -= stopseq.Partial(p.pending, markers)
				}
				d.Content += p.content(n, final)
				return d
			}
			if m == thinkOpen {
				if strings.TrimSpace(p.pending[:i]) != "" {
					p.started = true // <think> after the answer began is text
					continue
				}
				p.pending = p.pending[i+len(thinkOpen):]
				p.reasoning = true
				continue
			}
			d.Content += strings.TrimRightFunc(p.content(i, true), unicode.IsSpace)
			p.pending = p.pending[len(callOpen):] // content took what came before
			p.started, p.inCall = true, true
		}
	}
}

// content takes the first n bytes of pending as content text. Whitespace
// that opens the reply, or follows reasoning or a tool call, is dropped;
// unless final, trailing whitespace is held back (before a tool call it is
// dropped), so that however the text is split the result is the same.
func (p *replyParser) content(n int, final bool) string {
	text, rest := p.pending[:n], p.pending[n:]
	if !final {
		// A character split between pieces is decided once whole: its
		// first bytes alone are not whitespace, the character may be.
		k := len(text) - partialRune(text)
		text, rest = text[:k], text[k:]+rest
	}
	if p.segStart {
		text = strings.TrimLeftFunc(text, unicode.IsSpace)
		if text == "" {
			p.pending = rest
			return ""
		}
		p.segStart, p.started = false, true
	}
	if !final {
		kept := strings.TrimRightFunc(text, unicode.IsSpace)
		text, rest = kept, text[len(kept):]+rest
	}
	p.pending = rest
	return text
}

// partialRune is the length of the incomplete UTF-8 sequence that ends s
// (0 if s ends on a whole character or on bytes no further byte completes).
func partialRune(s string) int {
	for k := 1; k <= min(utf8.UTFMax-1, len(s)); k++ {
		if utf8.RuneStart(s[len(s)-k]) {
			if utf8.FullRuneInString(s[len(s)-k:]) {
				return 0
			}
			return k
		}
	}
	return 0
}

// parseCall parses the inside of <tool_call>...</tool_call>. An argument is
// a string where the function's schema says so; otherwise it is JSON if it
// parses as JSON, else a string.
func parseCall(body string, schemas map[string]map[string]string) (parsedCall, error) {
	name, rest, hasArgs := strings.Cut(body, argKey)
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, "<>") {
		return parsedCall{}, fmt.Errorf("tool call without a function name")
	}
	types := schemas[name]
	var args bytes.Buffer
	args.WriteByte('{')
	for n := 0; hasArgs; n++ {
		key, after, ok := strings.Cut(rest, argKeyEnd)
		if !ok {
			return parsedCall{}, fmt.Errorf("tool call %s: %s without %s", name, argKey, argKeyEnd)
		}
		after = strings.TrimSpace(after)
		if !strings.HasPrefix(after, argVal) {
			return parsedCall{}, fmt.Errorf("tool call %s: argument %q has no %s", name, key, argVal)
		}
		val, after, ok := strings.Cut(after[len(argVal):], argValEnd)
		if !ok {
			return parsedCall{}, fmt.Errorf("tool call %s: argument %q: %s without %s", name, key, argVal, argValEnd)
		}
		key = strings.TrimSpace(key)
		kj, _ := json.Marshal(key)
		if n > 0 {
			args.WriteByte(',')
		}
		args.Write(kj)
		args.WriteByte(':')
		args.Write(argJSON(val, types[key]))
		after = strings.TrimSpace(after)
		if after == "" {
			break
		}
		if !strings.HasPrefix(after, argKey) {
			return parsedCall{}, fmt.Errorf("tool call %s: unexpected text %q between arguments", name, after)
		}
		rest = after[len(argKey):]
	}
	args.WriteByte('}')
	return parsedCall{Name: name, Arguments: args.String()}, nil
}

// argJSON returns an argument value as JSON.
func argJSON(val, schemaType string) []byte {
	if schemaType != "string" {
		t := strings.TrimSpace(val)
		if json.Valid([]byte(t)) && t != "" {
			var b bytes.Buffer
			if json.Compact(&b, []byte(t)) == nil {
				return b.Bytes()
			}
		}
	}
	s, _ := json.Marshal(val)
	return s
}

// toolSchemas maps each function of an OpenAI tools list to its arguments'
// JSON schema types, and checks the list's shape.
func toolSchemas(tools []json.RawMessage) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for i, raw := range tools {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string `json:"name"`
				Parameters struct {
					Properties map[string]struct {
						Type any `json:"type"`
					} `json:"properties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("tools[%d]: %v", i, err)
		}
		if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
		}
		types := map[string]string{}
		for k, p := range t.Function.Parameters.Properties {
			if s, ok := p.Type.(string); ok {
				types[k] = s
			}
		}
		out[t.Function.Name] = types
	}
	return out, nil
}
