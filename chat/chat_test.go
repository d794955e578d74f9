package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lagc/tokenizer"
)

// chat_reference.json holds transformers 5.17's apply_chat_template output
// for chat_cases.json, computed on the H200 machine by
// testdata/tokenizer/gen_reference.py.
const fixtureDir = "../testdata/tokenizer"

type chatCase struct {
	Name                string            `json:"name"`
	Messages            json.RawMessage   `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Kwargs              map[string]any    `json:"kwargs"`
}

type chatReference struct {
	Templates map[string][]struct {
		Name  string  `json:"name"`
		Text  string  `json:"text"`
		IDs   []int32 `json:"ids"`
		Error string  `json:"error"`
	} `json:"templates"`
}

// The special tokens gen_reference.py gave the reference tokenizer.
var fixtureSpecial = map[string]string{
	"bos_token": "〈|EOS|〉", "eos_token": "〈|EOS|〉", "pad_token": "〈|PAD|〉", "unk_token": "〈|UNK|〉",
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func compileFixture(t *testing.T, name string) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Compile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func TestMatchesApplyChatTemplate(t *testing.T) {
	var cases []chatCase
	readJSON(t, "chat_cases.json", &cases)
	var ref chatReference
	readJSON(t, "chat_reference.json", &ref)
	tk, err := tokenizer.LoadHFJSON(filepath.Join(fixtureDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Templates) != 2 {
		t.Fatalf("reference has %d templates, want 2", len(ref.Templates))
	}
	for name, outs := range ref.Templates {
		tmpl := compileFixture(t, name)
		if len(outs) != len(cases) {
			t.Fatalf("%s: %d reference renderings for %d cases", name, len(outs), len(cases))
		}
		for i, c := range cases {
			want := outs[i]
			if want.Error != "" || want.Name != c.Name {
				t.Fatalf("%s/%s: reference entry %q has error %q", name, c.Name, want.Name, want.Error)
			}
			got, err := tmpl.RenderJSON(c.Messages, Options{
				AddGenerationPrompt: c.AddGenerationPrompt, Tools: c.Tools,
				SpecialTokens: fixtureSpecial, Vars: c.Kwargs,
			})
			if err != nil {
				t.Errorf("%s/%s: %v", name, c.Name, err)
				continue
			}
			if got != want.Text {
				t.Errorf("%s/%s:\n got  %q\n want %q", name, c.Name, got, want.Text)
				continue
			}
			if ids := tk.Encode(got, false); !slices.Equal(ids, want.IDs) {
				t.Errorf("%s/%s: token ids differ from HF:\n got  %v\n want %v", name, c.Name, ids, want.IDs)
			}
		}
	}
}

// Typed messages render like the same conversation given as JSON.
func TestRenderTypedMessages(t *testing.T) {
	var ref chatReference
	readJSON(t, "chat_reference.json", &ref)
	var cases []chatCase
	readJSON(t, "chat_cases.json", &cases)
	tmpl := compileFixture(t, "laguna_chat_template.jinja")
	msgs := []Message{
		{Role: "system", Content: "You can call tools."},
		{Role: "user", Content: "Weather in Zürich?"},
		{Role: "assistant", ToolCalls: []ToolCall{{Type: "function", Function: FunctionCall{
			Name: "get_weather", Arguments: json.RawMessage(`{"city": "Zürich", "unit": "c"}`)}}}},
		{Role: "tool", Content: `{"temp": 21, "sky": "clear"}`},
		{Role: "assistant", Content: "It is 21 °C and clear."},
	}
	const idx = 4
	if cases[idx].Name != "tools_roundtrip" {
		t.Fatalf("case %d is %q", idx, cases[idx].Name)
	}
	got, err := tmpl.Render(msgs, Options{Tools: cases[idx].Tools, SpecialTokens: fixtureSpecial})
	if err != nil {
		t.Fatal(err)
	}
	if want := ref.Templates["laguna_chat_template.jinja"][idx].Text; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestRenderErrors(t *testing.T) {
	tmpl := compileFixture(t, "laguna_chat_template.jinja")
	if _, err := tmpl.Render([]Message{{Role: "wizard", Content: "x"}}, Options{}); err == nil ||
		!strings.Contains(err.Error(), "unknown role") {
		t.Errorf("raise_exception not reported: %v", err)
	}
	if _, err := tmpl.RenderJSON(json.RawMessage(`{"role": "user"}`), Options{}); err == nil {
		t.Error("non-array messages accepted")
	}
	if _, err := tmpl.RenderJSON(json.RawMessage(`[`), Options{}); err == nil {
		t.Error("broken JSON accepted")
	}
	if _, err := Compile("{% if x %}unclosed"); err == nil {
		t.Error("broken template compiled")
	}
}

func TestLoadHFDir(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(fixtureDir, "laguna_chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		tools   string // template For(true) returns
		wantErr string
	}{
		{"jinja file", map[string]string{"chat_template.jinja": string(src),
			"tokenizer_config.json": `{"bos_token": {"content": "〈|EOS|〉"}}`}, string(src), string(src), ""},
		{"config string", map[string]string{"tokenizer_config.json": `{"chat_template": "A{{ bos_token }}"}`}, "A{{ bos_token }}", "A{{ bos_token }}", ""},
		{"config named", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]}`}, "D", "T", ""},
		{"named without default", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "x", "template": "X"}]}`}, "", "", "no \"default\""},
		{"none", map[string]string{"tokenizer_config.json": `{}`}, "", "", "no chat template"},
		{"broken config", map[string]string{"tokenizer_config.json": `{"chat_template": 3}`}, "", "", "neither a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := LoadHFDir(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Default != tc.want || s.For(true) != tc.tools {
				t.Errorf("Default %q, For(tools) %q", s.Default, s.For(true))
			}
		})
	}
}

// FuzzFromJSON: the JSON-to-template-value converter must not panic and
// must reject what encoding/json rejects.
func FuzzFromJSON(f *testing.F) {
	for _, s := range []string{`[{"role":"user","content":"hi"}]`, `{"a":1,"b":[1.5,null,true]}`, `[`, `1 2`, `"x"`, `{"a":}`, `[[[[[]]]]]`, `{"k": 1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := FromJSON(data)
		if err == nil && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
	})
}

// FuzzTemplate: a template shipped with a checkpoint is user input; Compile
// and Render must return errors, never panic, and stay within their limits.
func FuzzTemplate(f *testing.F) {
	for _, name := range []string{"laguna_chat_template.jinja", "chatml_blocks_template.jinja"} {
		src, err := os.ReadFile(filepath.Join(fixtureDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	for _, s := range []string{"{{ messages[0].content.items() }}", "{% for k, v in messages %}{{ k }}{% endfor %}",
		"{{ (messages | first).tool_calls[0].function.arguments | tojson(indent=2) }}", "{{ 1 / 0 }}",
		"{% set x = namespace(a=1) %}{{ x.a.b.c }}", "{{ messages[::-1][0]['role'] | upper }}", "{%- generation -%}x"} {
		f.Add(s)
	}
	hostile, err := filepath.Glob("../testdata/hostile/chat/*.jinja")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range hostile {
		src, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	msgs := json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"a":[1,2.5,null]}}}]}]`)
	// Small limits keep every input fast; hostile ones must stop with an
	// error, not hang, exhaust memory or overflow the stack.
	lim := Limits{Steps: 200_000, Alloc: 32 << 20, Output: 4 << 20}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Compile(src)
		if err != nil {
			return
		}
		_, err = tmpl.RenderJSON(msgs, Options{AddGenerationPrompt: true, Vars: map[string]any{"enable_thinking": false}, Limits: lim})
		if err != nil && strings.Contains(err.Error(), "template engine failed") {
			t.Fatalf("the engine panicked: %v", err)
		}
	})
}
