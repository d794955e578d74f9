// Package server is lagc's OpenAI-compatible HTTP API: /v1/chat/completions
// (the checkpoint's chat template; reasoning and Laguna's XML tool calls
// parsed into OpenAI's fields), /v1/completions, /v1/models, /health and
// /metrics (Prometheus), with server-sent-event streaming. Requests run on a
// continuous-batching scheduler (package sched) over a batched backend.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lagc/chat"
	"lagc/engine"
	"lagc/sched"
	"lagc/tokenizer"
)

// Config describes what a server serves.
type Config struct {
	Name      string // the model id clients name; requests naming another are refused
	Tokenizer *tokenizer.Tokenizer
	// Template renders chats; ToolTemplate, if set, those with tools (HF's
	// "tool_use" template). Without Template, chat completions are refused.
	Template, ToolTemplate *chat.Template
	SpecialTokens          map[string]string
	Sched                  sched.Config // MaxQueue and Budget; Vocab and hooks are set here
	MaxBodyBytes           int64        // request bodies beyond it are refused; 0: 8 MiB
	// APIKey, if set, is required as "Authorization: Bearer KEY" on every
	// route but /health and /metrics.
	APIKey string
	Log    io.Writer // one line per failed request; nil: stderr
}

// Server serves one model. Handler returns its routes; Close stops its
// scheduler.
type Server struct {
	cfg     Config
	batch   engine.Batcher
	sched   *sched.Scheduler
	metrics *metrics
	mux     *http.ServeMux
	created int64
	vocab   int // the logits' length
}

// New starts a server's scheduler over b for a model of the given
// vocabulary.
func New(b engine.Batcher, vocab int, cfg Config) (*Server, error) {
	if cfg.Tokenizer == nil {
		return nil, fmt.Errorf("server: a tokenizer is required")
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("server: the model needs a name")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 8 << 20
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	s := &Server{cfg: cfg, batch: b, created: time.Now().Unix(), vocab: vocab}
	s.metrics = newMetrics(b.Slots())
	sc := cfg.Sched
	sc.Vocab = vocab
	sc.OnStep = s.metrics.step
	sc.OnToken = s.metrics.token
	var err error
	if s.sched, err = sched.New(b, sc); err != nil {
		return nil, err
	}
	s.metrics.load = s.sched.Load
	s.routes()
	return s, nil
}

// FromModel serves a loaded model (opened with Options.Slots) with the
// tokenizer and chat templates of its checkpoint; cfg.Name defaults to the
// checkpoint's file or directory name.
func FromModel(m *engine.Model, cfg Config) (*Server, error) {
	b, err := m.Batch()
	if err != nil {
		return nil, err
	}
	if cfg.Tokenizer == nil {
		if cfg.Tokenizer, err = engine.LoadTokenizer(m.Checkpoint); err != nil {
			return nil, fmt.Errorf("serving needs the checkpoint's tokenizer: %w", err)
		}
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Template == nil {
		// A checkpoint without a chat template still serves /v1/completions.
		if cfg.Template, cfg.SpecialTokens, err = engine.LoadChatTemplate(m.Checkpoint); err != nil {
			cfg.Template = nil
			fmt.Fprintf(cfg.Log, "chat completions are off: %v\n", err)
		}
		if cfg.Template != nil && m.Checkpoint.Format() != "gguf" {
			if src, err := chat.LoadHFDir(m.Checkpoint.Path()); err == nil && src.For(true) != src.For(false) {
				if cfg.ToolTemplate, err = chat.Compile(src.For(true)); err != nil {
					return nil, fmt.Errorf("%s: tool_use chat template: %w", m.Checkpoint.Path(), err)
				}
			}
		}
	}
	if cfg.Name == "" {
		cfg.Name = strings.TrimSuffix(filepath.Base(m.Checkpoint.Path()), ".gguf")
	}
	return New(b, m.Config.VocabSize, cfg)
}

// Close cancels every request still running and stops the scheduler.
func (s *Server) Close() { s.sched.Close() }

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting connections and lets running requests finish for up to grace,
// then cancels what is left. It closes the scheduler before returning.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	hs := &http.Server{Handler: s.mux, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Cancelled streams end their handlers, which write their last
		// chunk; then whatever is left is closed.
		s.Close()
		last, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err = hs.Shutdown(last); err != nil {
			err = hs.Close()
		}
	}
	s.Close()
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	handle := func(path, method, endpoint string, h func(http.ResponseWriter, *http.Request)) {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			rw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
			defer func() { s.metrics.request(endpoint, rw.code) }()
			if path != "/health" && !s.authorized(r) {
				rw.Header().Set("WWW-Authenticate", `Bearer realm="lagc"`)
				writeError(rw, http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key",
					"missing or wrong API key: send the server's key as \"Authorization: Bearer KEY\"")
				return
			}
			if r.Method != method {
				rw.Header().Set("Allow", method)
				writeError(rw, http.StatusMethodNotAllowed, "invalid_request_error", "", "method_not_allowed",
					fmt.Sprintf("%s takes %s, not %s", path, method, r.Method))
				return
			}
			h(rw, r)
		})
	}
	handle("/v1/chat/completions", http.MethodPost, "chat", s.chatCompletions)
	handle("/v1/completions", http.MethodPost, "completions", s.completions)
	handle("/v1/models", http.MethodGet, "models", s.models)
	handle("/tokenize", http.MethodPost, "tokenize", s.tokenize)
	handle("/detokenize", http.MethodPost, "detokenize", s.detokenize)
	handle("/health", http.MethodGet, "health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.Handle("/metrics", s.metrics.handler())
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "not_found",
			fmt.Sprintf("no route %s %s: lagc serves /v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize, /health and /metrics", r.Method, r.URL.Path))
	})
}

// authorized checks the request's bearer token against Config.APIKey in
// constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.cfg.APIKey)) == 1
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.cfg.Name, "object": "model", "created": s.created, "owned_by": "lagc",
			"max_model_len": s.batch.MaxPos(),
		}},
	})
}

// statusWriter records the status code for the metrics; Unwrap lets
// http.ResponseController reach the connection's Flush.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpError is a request failure with its HTTP status and OpenAI error
// fields.
type httpError struct {
	status      int
	typ, param  string
	code, msg   string
	logWorthy   bool // a server-side failure, logged
	retryAfterS int
}

func (e *httpError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error(), logWorthy: true}
	}
	if he.logWorthy {
		fmt.Fprintf(s.cfg.Log, "%s %s: %v\n", r.Method, r.URL.Path, he.msg)
	}
	if he.retryAfterS > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(he.retryAfterS))
	}
	writeError(w, he.status, he.typ, he.param, he.code, he.msg)
}

func writeError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	d := errorDetail{Message: msg, Type: typ}
	if param != "" {
		d.Param = &param
	}
	if code != "" {
		d.Code = &code
	}
	writeJSON(w, status, apiError{Error: d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decodeBody reads a JSON request body into v.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &httpError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
				msg: fmt.Sprintf("the request body is larger than %d bytes", tooBig.Limit)}
		}
		return badRequest("", "the request body is not valid JSON for this endpoint: %v", err)
	}
	if dec.More() {
		return badRequest("", "the request body has data after its JSON object")
	}
	return nil
}

// checkModel refuses a request naming another model.
func (s *Server) checkModel(name string) error {
	if name != "" && name != s.cfg.Name {
		return &httpError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			msg: fmt.Sprintf("the model %q does not exist: this server serves %q", name, s.cfg.Name)}
	}
	return nil
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
