package sim

import (
	"encoding/json"
	"net/http"

	"github.com/lmwarden/warden/sim/model"
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
		anthropicError(w, http.StatusNotFound, err.Error())
		return body, nil, false
	}
	if !body.Get("messages").IsArray() {
		anthropicError(w, http.StatusBadRequest, "messages: field required (an array)")
		return body, nil, false
	}
	return body, model.Tokenize(model.RenderChat(anthropicTurns(body), toolsRaw(body.Get("tools")))), true
}

func (s *server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	_, prompt, ok := s.anthropicPrompt(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(prompt)})
}

// anthropicUsage is vLLM 0.32's (_build_anthropic_usage): Anthropic's
// convention, input_tokens without the cache. With prompt-token details on,
// input_tokens = prompt - cache reads - cache writes, and both cache fields
// are present (0 included); without, input_tokens is the whole prompt.
func (s *server) anthropicUsage(u usage) map[string]any {
	m := map[string]any{"input_tokens": u.prompt, "output_tokens": u.completion}
	if s.cfg.PromptDetails {
		m["input_tokens"] = max(u.prompt-u.cached-u.created, 0)
		m["cache_creation_input_tokens"] = u.created
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
	tc := anthropicToolChoice(body)
	if msg := s.toolRefusal(tc); msg != "" {
		anthropicError(w, http.StatusBadRequest, msg)
		return
	}
	// vLLM 0.32's Messages request has no ignore_eos (it is dropped as an
	// unknown field); the simulator honours it so that the bench's
	// Anthropic protocol keeps its fixed output length here.
	p, err := s.plan(prompt, body.Get("max_tokens"), "max_completion_tokens", body.Get("ignore_eos").Bool())
	if err != nil {
		anthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.forceToolCall(&p, tc, anthropicTools(body))
	p.kv = kvLabels(r, body)
	proceed, die := s.faultGate(w, r)
	if !proceed {
		return
	}
	// vLLM 0.32 honours the rank header here: Messages is served by its
	// chat completions (create_chat_completion with the raw request).
	if !s.place(r, &p, true, refuseMessages(w, body.Get("stream").Bool())) {
		return
	}
	name := s.answerModel(body)
	msg := map[string]any{"id": newID("msg_"), "type": "message", "role": "assistant", "model": name,
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
	msg["stop_reason"] = anthropicStop(req.StopReason())
	if p.call != nil {
		msg["content"] = []any{map[string]any{"type": "tool_use", "id": p.call.id, "name": p.call.name, "input": json.RawMessage(p.call.args)}}
		msg["stop_reason"] = "tool_use"
	}
	msg["usage"] = s.anthropicUsage(s.usageOf(req))
	writeJSON(w, http.StatusOK, msg)
}

// messagesStream sends message_start, content_block_start, deltas,
// content_block_stop, message_delta (usage) and message_stop.
func (s *server) messagesStream(w http.ResponseWriter, r *http.Request, p genPlan, die bool, msg map[string]any) {
	var sse *sseWriter
	block := map[string]any{"type": "text", "text": ""}
	if p.call != nil { // a forced tool call: a tool_use block, its input streamed as JSON deltas
		block = map[string]any{"type": "tool_use", "id": p.call.id, "name": p.call.name, "input": map[string]any{}}
	}
	pos := 0 // bytes of the call's text generated so far
	req, err := s.run(r.Context(), p, die, func(text string, final bool) error {
		if sse == nil {
			sse = newSSE(w)
			msg["content"] = []any{}
			msg["usage"] = map[string]any{"input_tokens": len(p.prompt), "output_tokens": 0}
			if err := sse.event("message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
				return err
			}
			if err := sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": block}); err != nil {
				return err
			}
		}
		if p.call != nil {
			d := p.call.argsIn(pos, pos+len(text))
			pos += len(text)
			if d == "" {
				return nil
			}
			return sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": d}})
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
	stop := anthropicStop(req.StopReason())
	if p.call != nil {
		stop = "tool_use"
	}
	_ = sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	_ = sse.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": s.anthropicUsage(s.usageOf(req))})
	_ = sse.event("message_stop", map[string]any{"type": "message_stop"})
}
