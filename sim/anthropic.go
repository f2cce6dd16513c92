package sim

import (
	"net/http"

	"github.com/tidwall/gjson"
)

// Anthropic Messages endpoints as vLLM serves them: /v1/messages (SSE or
// JSON) and /v1/messages/count_tokens. Claude Code's request shape (system
// as string or blocks, role "system" messages, thinking, tools, metadata,
// context_management, ?beta=true) is accepted.

func (s *server) anthropicPrompt(w http.ResponseWriter, r *http.Request) (gjson.Result, []uint32, bool) {
	raw, ok := s.readBody(w, r, true)
	if !ok {
		return gjson.Result{}, nil, false
	}
	body := gjson.ParseBytes(raw)
	if err := s.checkModel(body.Get("model").String()); err != nil {
		anthropicError(w, http.StatusNotFound, "not_found_error", err.Error())
		return body, nil, false
	}
	if !body.Get("messages").IsArray() {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "messages: field required (an array)")
		return body, nil, false
	}
	return body, Tokenize(renderChat(anthropicTurns(body), toolsRaw(body.Get("tools")))), true
}

func (s *server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	_, prompt, ok := s.anthropicPrompt(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(prompt)})
}

// anthropicUsage reports input_tokens as the whole prompt (as vLLM does) and
// cache_read_input_tokens when prompt-token details are on and non-zero.
func (s *server) anthropicUsage(u usage, withInput bool) map[string]any {
	m := map[string]any{"output_tokens": u.completion}
	if withInput {
		m["input_tokens"] = u.prompt
	}
	if s.cfg.PromptDetails && u.cached > 0 {
		m["cache_read_input_tokens"] = u.cached
	}
	return m
}

func anthropicStop(reason string) string {
	if reason == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

func (s *server) handleMessages(w http.ResponseWriter, r *http.Request) {
	body, prompt, ok := s.anthropicPrompt(w, r)
	if !ok {
		return
	}
	p, err := s.plan(prompt, body.Get("max_tokens"))
	if err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	proceed, die := s.faultGate(w, r)
	if !proceed {
		return
	}
	model := s.answerModel(body)
	msg := map[string]any{"id": newID("msg_"), "type": "message", "role": "assistant", "model": model,
		"stop_reason": nil, "stop_sequence": nil}
	if body.Get("stream").Bool() {
		s.messagesStream(w, r, p, die, msg)
		return
	}
	var text string
	req, err := s.run(r.Context(), p, die, func(t string, _ bool) error { text += t; return nil })
	if err != nil {
		return
	}
	msg["content"] = []any{map[string]any{"type": "text", "text": text}}
	msg["stop_reason"] = anthropicStop(req.stopReason)
	msg["usage"] = s.anthropicUsage(usageOf(req), true)
	writeJSON(w, http.StatusOK, msg)
}

// messagesStream sends message_start, content_block_start, deltas,
// content_block_stop, message_delta (usage) and message_stop.
func (s *server) messagesStream(w http.ResponseWriter, r *http.Request, p genPlan, die bool, msg map[string]any) {
	var sse *sseWriter
	req, err := s.run(r.Context(), p, die, func(text string, final bool) error {
		if sse == nil {
			sse = newSSE(w)
			msg["content"] = []any{}
			msg["usage"] = map[string]any{"input_tokens": len(p.prompt), "output_tokens": 0}
			if err := sse.event("message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
				return err
			}
			if err := sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]any{"type": "text", "text": ""}}); err != nil {
				return err
			}
		}
		if text == "" {
			return nil
		}
		return sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": text}})
	})
	if err != nil || sse == nil {
		return
	}
	_ = sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	_ = sse.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStop(req.stopReason), "stop_sequence": nil},
		"usage": s.anthropicUsage(usageOf(req), true)})
	_ = sse.event("message_stop", map[string]any{"type": "message_stop"})
}
