package main

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"lagc/chat"
	"lagc/engine"
	"lagc/models"
)

// chatTurn is one line of `lagc run --chat --json`.
type chatTurn struct {
	Turn         int     `json:"turn"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	GeneratedIDs []int32 `json:"generated_ids"`
	Text         string  `json:"text"`
	StopReason   string  `json:"stop_reason"`
}

// runChatJSON runs --chat --json on the bundled model with the user lines
// in stdin and returns the turns and stderr.
func runChatJSON(t *testing.T, stdin string, args ...string) ([]chatTurn, string) {
	t.Helper()
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	code, out, errs := runChatCapture(t, stdin, append([]string{"run", "--chat", "--json", "--device", "cpu"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var turns []chatTurn
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var tu chatTurn
		if err := dec.Decode(&tu); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("stdout is not JSON objects: %v\n%s", err, out)
		}
		turns = append(turns, tu)
	}
	return turns, errs
}

// bundledChat opens the bundled model with its tokenizer and template.
func bundledChat(t *testing.T) (*engine.Model, *chatSession) {
	t.Helper()
	ck, _, err := models.OpenBundled()
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.OpenCheckpoint(ck, engine.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := engine.LoadTokenizer(m.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, special, err := engine.LoadChatTemplate(m.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	return m, &chatSession{m: m, tok: tok, tmpl: tmpl, special: special, f: &runFlags{set: map[string]bool{}}}
}

// TestChatReusesCache: the second turn feeds only the tokens the template
// added after the cached ones, and replies exactly what rendering the
// whole conversation and prefilling it from scratch gives.
func TestChatReusesCache(t *testing.T) {
	turns, errs := runChatJSON(t, "package main\nfunc add\n", "-n", "12", "--verbose")
	if len(turns) != 2 {
		t.Fatalf("%d turns, want 2\n%s", len(turns), errs)
	}
	if turns[0].CachedTokens != 0 || turns[1].CachedTokens == 0 || turns[1].CachedTokens >= turns[1].PromptTokens {
		t.Fatalf("cached tokens %d then %d (of %d): want 0, then most of the conversation", turns[0].CachedTokens, turns[1].CachedTokens, turns[1].PromptTokens)
	}
	if strings.Contains(errs, "reading all of it again") {
		t.Fatalf("the second turn re-read the conversation:\n%s", errs)
	}

	m, s := bundledChat(t)
	user1 := chat.Message{Role: "user", Content: "package main"}
	rendered1, err := s.render(user1)
	if err != nil {
		t.Fatal(err)
	}
	reply := s.replyText(&engine.GenResult{Generated: turns[0].GeneratedIDs, StopReason: turns[0].StopReason})
	s.history = []chat.Message{user1, assistantMessage(rendered1, reply)}
	rendered2, err := s.render(chat.Message{Role: "user", Content: "func add"})
	if err != nil {
		t.Fatal(err)
	}
	ids := s.tok.Encode(rendered2, false)
	if len(ids) != turns[1].PromptTokens {
		t.Fatalf("the conversation renders to %d tokens, the chat fed %d", len(ids), turns[1].PromptTokens)
	}
	res, err := m.Generate(context.Background(), ids, engine.GenOptions{MaxTokens: 12, Stop: s.tok.IsEOG})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Generated, turns[1].GeneratedIDs) {
		t.Fatalf("second turn with the cache %v, from scratch %v", turns[1].GeneratedIDs, res.Generated)
	}
}

// TestChatResetAndExit: /reset starts over (nothing cached, the same reply
// as the first time); /exit ends the session and later lines are unread.
func TestChatResetAndExit(t *testing.T) {
	turns, errs := runChatJSON(t, "package main\n/reset\npackage main\n/exit\nfunc main\n", "-n", "8")
	if len(turns) != 2 || !strings.Contains(errs, "conversation cleared") {
		t.Fatalf("%d turns, want 2 and a cleared conversation\n%s", len(turns), errs)
	}
	if turns[1].CachedTokens != 0 || !slices.Equal(turns[0].GeneratedIDs, turns[1].GeneratedIDs) {
		t.Fatalf("after /reset: cached %d, reply %v; want 0 and %v", turns[1].CachedTokens, turns[1].GeneratedIDs, turns[0].GeneratedIDs)
	}
}

// TestChatContextFull: when the conversation outgrows the context, the
// oldest turns are dropped and the session goes on; a message too long for
// the context alone is not sent, and the session goes on too.
func TestChatContextFull(t *testing.T) {
	turns, errs := runChatJSON(t, "package main\nfunc add\nimport \"fmt\"\ntype T struct\nvar x int\n", "-n", "16", "--ctx", "160")
	if len(turns) != 5 || !strings.Contains(errs, "the context is full: dropped the oldest") {
		t.Fatalf("%d turns, want 5 with turns dropped\n%s", len(turns), errs)
	}
	for _, tu := range turns {
		if tu.PromptTokens+16 > 160 || len(tu.GeneratedIDs) == 0 {
			t.Fatalf("turn %d: %d prompt tokens, %d generated in a context of 160", tu.Turn, tu.PromptTokens, len(tu.GeneratedIDs))
		}
	}
	long := strings.Repeat("func f() {} ", 40)
	turns, errs = runChatJSON(t, long+"\npackage main\n", "-n", "8", "--ctx", "100")
	if len(turns) != 1 || !strings.Contains(errs, "chat: not sent: the message makes a conversation of") {
		t.Fatalf("%d turns, want 1 after a message that was not sent\n%s", len(turns), errs)
	}
}

// TestChatSystem: --system replaces the template's default system message.
func TestChatSystem(t *testing.T) {
	const system = "Answer in Go."
	turns, _ := runChatJSON(t, "package main\n", "-n", "4", "--system", system)
	_, s := bundledChat(t)
	s.f.set["system"], s.f.system = true, system
	rendered, err := s.render(chat.Message{Role: "user", Content: "package main"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rendered, "<system>"+system+"</system>") {
		t.Fatalf("rendering lacks the system message: %q", rendered)
	}
	if n := len(s.tok.Encode(rendered, false)); len(turns) != 1 || turns[0].PromptTokens != n {
		t.Fatalf("turns %+v; want one of %d prompt tokens", turns, n)
	}
}

func TestAssistantMessage(t *testing.T) {
	for _, c := range []struct {
		rendered, reply    string
		reasoning, content string
	}{
		{"<assistant>", "hello", "", "hello"},
		{"<assistant><think>", "because</think>hello", "because", "hello"},
		{"<assistant><think>", "still thinking", "still thinking", ""},
	} {
		m := assistantMessage(c.rendered, c.reply)
		if m.Role != "assistant" || m.ReasoningContent != c.reasoning || m.Content != c.content {
			t.Errorf("after %q, %q: %+v; want reasoning %q, content %q", c.rendered, c.reply, m, c.reasoning, c.content)
		}
	}
}

// TestChatInterrupt: Ctrl-C during a reply ends that reply and the session
// goes on; Ctrl-C at the prompt ends the session with exit status 0.
func TestChatInterrupt(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	// A message of about 3500 tokens: its prefill takes seconds on the CPU.
	msg := strings.ReplaceAll(mustRead(t, "run.go")[:9000], "\n", " ")
	p := startLagc(t, "run", "--chat", "--device", "cpu", "-n", "400")
	p.waitFor(t, "> ", 1)
	if _, err := io.WriteString(p.stdin, msg+"\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGINT)
	p.waitFor(t, "stop: canceled", 1)
	p.waitFor(t, "> ", 2)
	p.cmd.Process.Signal(syscall.SIGINT)
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.log.String())
	}
}
