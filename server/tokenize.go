package server

import (
	"encoding/json"
	"net/http"
)

// POST /tokenize and /detokenize, in vLLM's shapes: a client counts a
// prompt's tokens (or a chat's, rendered as /v1/chat/completions renders
// it) without generating.

type tokenizeRequest struct {
	Model string `json:"model"`
	// Prompt is encoded as /v1/completions encodes a string prompt: with
	// the tokenizer's special prefix unless add_special_tokens is false.
	Prompt           *string `json:"prompt"`
	AddSpecialTokens *bool   `json:"add_special_tokens"`
	// Messages are rendered with the chat template first.
	Messages            []chatMessage     `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
}

type tokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := s.readModelRequest(w, r, &req, &req.Model); err != nil {
		s.fail(w, r, err)
		return
	}
	var ids []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.fail(w, r, badRequest("prompt", "give prompt or messages, not both"))
		return
	case req.Prompt != nil:
		ids = s.cfg.Tokenizer.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	case len(req.Messages) > 0:
		if req.AddSpecialTokens != nil && *req.AddSpecialTokens {
			s.fail(w, r, badRequest("add_special_tokens", "add_special_tokens goes with prompt: the chat template writes its own"))
			return
		}
		text, err := s.renderChat(req.Messages, req.Tools, req.ChatTemplateKwargs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ids = s.cfg.Tokenizer.Encode(text, false)
	default:
		s.fail(w, r, badRequest("prompt", "give prompt (a string) or messages"))
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: s.batch.MaxPos(), Tokens: ids})
}

type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

// detokenize decodes ids as they are, special tokens included: the inverse
// of /tokenize.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if err := s.readModelRequest(w, r, &req, &req.Model); err != nil {
		s.fail(w, r, err)
		return
	}
	V := s.cfg.Tokenizer.VocabSize()
	for i, id := range req.Tokens {
		if id < 0 || int(id) >= V {
			s.fail(w, r, badRequest("tokens", "tokens[%d] = %d is outside the vocabulary [0, %d)", i, id, V))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": s.cfg.Tokenizer.Decode(req.Tokens)})
}

// readModelRequest decodes a request body into v and checks the model it
// names (*model, a field of v).
func (s *Server) readModelRequest(w http.ResponseWriter, r *http.Request, v any, model *string) error {
	if err := s.decodeBody(w, r, v); err != nil {
		return err
	}
	return s.checkModel(*model)
}
