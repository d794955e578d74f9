package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"lagc/chat"
	"lagc/engine"
	"lagc/tokenizer"
)

// chatSession is an interactive conversation on one model sequence. Every
// turn renders the whole conversation with the checkpoint's template; when
// that rendering extends the tokens already in the model's KV caches, only
// the new tokens are fed.
type chatSession struct {
	m       *engine.Model
	tok     *tokenizer.Tokenizer
	tmpl    *chat.Template
	special map[string]string
	gen     engine.GenOptions
	f       *runFlags
	history []chat.Message // user and assistant turns, oldest first
	turns   int
}

// runChat reads user lines from stdin until /exit, an empty line, Ctrl-D or
// Ctrl-C at the prompt; Ctrl-C during a reply ends that reply only.
func runChat(m *engine.Model, tok *tokenizer.Tokenizer, gen engine.GenOptions, f *runFlags) error {
	tmpl, special, err := engine.LoadChatTemplate(m.Checkpoint)
	if err != nil {
		return fmt.Errorf("--chat: %w", err)
	}
	gen.Stop = tok.IsEOG
	s := &chatSession{m: m, tok: tok, tmpl: tmpl, special: special, gen: gen, f: f}

	lines, readErr := make(chan string), make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		in := bufio.NewScanner(runIO.in)
		in.Buffer(make([]byte, 1<<20), 1<<20)
		for in.Scan() {
			select {
			case lines <- in.Text():
			case <-quit:
				return
			}
		}
		readErr <- in.Err()
		close(lines)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)

	fmt.Fprintln(runIO.err, "chat: type a message and press Enter; /reset starts over; /exit, an empty line or Ctrl-D ends")
	for {
		fmt.Fprint(runIO.err, "> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(runIO.err)
				return <-readErr
			}
			line = strings.TrimSpace(l)
		case <-sig:
			fmt.Fprintln(runIO.err)
			return nil
		}
		switch line {
		case "", "/exit":
			return nil
		case "/reset":
			s.history = nil
			s.m.Reset()
			fmt.Fprintln(runIO.err, "chat: conversation cleared")
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		replied := make(chan struct{})
		go func() {
			select {
			case <-sig:
				cancel()
			case <-replied:
			}
		}()
		err := s.turn(ctx, line)
		close(replied)
		cancel()
		if err != nil {
			return err
		}
	}
}

// messages is the conversation to render: the --system message, the
// history and the new user message.
func (s *chatSession) messages(user chat.Message) []chat.Message {
	var msgs []chat.Message
	if s.f.set["system"] {
		msgs = append(msgs, chat.Message{Role: "system", Content: s.f.system})
	}
	return append(append(msgs, s.history...), user)
}

func (s *chatSession) render(user chat.Message) (string, error) {
	return s.tmpl.Render(s.messages(user), chat.Options{AddGenerationPrompt: true, SpecialTokens: s.special})
}

// fit renders the conversation with the new message, dropping the oldest
// turns until a reply of -n tokens (at most half the context) fits. A
// message that does not fit even alone is not sent (ids nil), said on
// stderr; the session goes on.
func (s *chatSession) fit(user chat.Message) (ids []int32, rendered string, err error) {
	ctxLen := s.m.Backend.MaxPos()
	reserve := min(s.gen.MaxTokens, ctxLen/2)
	dropped := 0
	for {
		if rendered, err = s.render(user); err != nil {
			return nil, "", err
		}
		// The template writes its own special tokens.
		ids = s.tok.Encode(rendered, false)
		if len(ids)+reserve <= ctxLen || (len(s.history) == 0 && len(ids) < ctxLen) {
			break
		}
		if len(s.history) == 0 {
			fmt.Fprintf(runIO.err, "chat: not sent: the message makes a conversation of %d tokens, more than the context of %d (--ctx) holds with room for a reply\n", len(ids), ctxLen)
			return nil, "", nil
		}
		// Drop the oldest user message and the replies to it.
		n := 1
		for n < len(s.history) && s.history[n].Role != "user" {
			n++
		}
		s.history = s.history[n:]
		dropped++
	}
	if dropped > 0 {
		fmt.Fprintf(runIO.err, "chat: the context is full: dropped the oldest %d turn(s)\n", dropped)
	}
	return ids, rendered, nil
}

// generate feeds the conversation: only the tokens after those in the
// cache when the rendering extends them, else the whole of it.
func (s *chatSession) generate(ctx context.Context, ids []int32, gen engine.GenOptions) (*engine.GenResult, error) {
	seq := s.m.Sequence()
	if len(seq) == 0 {
		return s.m.Generate(ctx, ids, gen)
	}
	same := 0
	for same < min(len(seq), len(ids)) && seq[same] == ids[same] {
		same++
	}
	if same == len(seq) && len(ids) > len(seq) {
		return s.m.Continue(ctx, ids[len(seq):], gen)
	}
	if s.f.verbose {
		fmt.Fprintf(runIO.err, "chat: the conversation (%d tokens) does not extend the %d cached tokens (they differ from token %d): reading all of it again\n",
			len(ids), len(seq), same)
	}
	return s.m.Generate(ctx, ids, gen)
}

// turn sends one user message and streams the reply.
func (s *chatSession) turn(ctx context.Context, line string) error {
	user := chat.Message{Role: "user", Content: line}
	ids, rendered, err := s.fit(user)
	if err != nil || ids == nil {
		return err
	}
	out := newTokenOutput(s.tok, s.f.stops, true, s.f.jsonOut)
	gen := s.gen
	gen.OnToken = out.add
	res, err := s.generate(ctx, ids, gen)
	if err != nil {
		return err
	}
	out.finish()
	reportSpeed(res)
	s.turns++
	if s.f.jsonOut {
		if err := json.NewEncoder(runIO.out).Encode(map[string]any{
			"turn": s.turns, "prompt_tokens": len(ids), "cached_tokens": res.Start,
			"generated_ids": nonNil(res.Generated), "text": out.text.String(), "stop_reason": res.StopReason,
		}); err != nil {
			return err
		}
	}
	if res.Fed < len(res.Prompt) {
		return nil // stopped before the model saw the message: it is not part of the conversation
	}
	text := s.replyText(res)
	if out.stops.Stopped() {
		text = out.text.String()
	}
	s.history = append(s.history, user, assistantMessage(rendered, text))
	if res.StopReason == "context" {
		fmt.Fprintln(runIO.err, "chat: the reply filled the context; the next turn drops the oldest turns")
	}
	return nil
}

// replyText is the reply as the template is to write it back: special
// tokens kept, the end-of-generation token that closed it left out (the
// template closes the turn itself).
func (s *chatSession) replyText(res *engine.GenResult) string {
	reply := res.Generated
	if res.StopReason == "stop" && len(reply) > 0 && s.tok.IsEOG(reply[len(reply)-1]) {
		reply = reply[:len(reply)-1]
	}
	return s.tok.DecodeWith(reply, tokenizer.DecodeOptions{})
}

// assistantMessage turns a reply into the message the template renders
// back. After a generation prompt that opens a <think> block (Laguna's), the
// reply's reasoning runs to </think> and goes into reasoning_content, so
// that the rendering reproduces the tokens the model produced.
func assistantMessage(rendered, reply string) chat.Message {
	msg := chat.Message{Role: "assistant", Content: reply}
	if strings.HasSuffix(rendered, "<think>") {
		reasoning, content, closed := strings.Cut(reply, "</think>")
		msg.ReasoningContent, msg.Content = reasoning, content
		if !closed {
			msg.Content = ""
		}
	}
	return msg
}
