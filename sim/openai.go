package sim

import (
	"context"
	"net/http"
	"time"

	"github.com/lmwarden/warden/sim/model"
	"github.com/tidwall/gjson"
)

// OpenAI-compatible endpoints: /v1/chat/completions and /v1/completions, in
// vLLM's response shapes.

// openAIUsage is vLLM 0.32's usage object: with --enable-prompt-tokens-details
// prompt_tokens_details is always there, cached_tokens 0 included; chat also
// reports created_cache_tokens (completions leave it null).
func (s *server) openAIUsage(u usage, chat bool) map[string]any {
	m := map[string]any{"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion, "prompt_tokens_details": nil}
	if s.cfg.PromptDetails {
		d := map[string]any{"cached_tokens": u.cached, "created_cache_tokens": nil}
		if chat {
			d["created_cache_tokens"] = u.created
		}
		m["prompt_tokens_details"] = d
	}
	return m
}

// openAIPrompt validates body and builds the generation plan, answering the
// error itself when it fails.
func (s *server) openAIPrompt(w http.ResponseWriter, r *http.Request, chat bool) (gjson.Result, genPlan, bool) {
	raw, ok := s.readBody(w, r, false)
	if !ok {
		return gjson.Result{}, genPlan{}, false
	}
	body := gjson.ParseBytes(raw)
	if err := s.checkModel(body.Get("model").String()); err != nil {
		openAIError(w, http.StatusNotFound, err.Error())
		return body, genPlan{}, false
	}
	var prompt []uint32
	maxTok := body.Get("max_tokens")
	if chat {
		if !body.Get("messages").IsArray() {
			openAIError(w, http.StatusBadRequest, "messages must be an array")
			return body, genPlan{}, false
		}
		if msg := s.toolRefusal(chatToolChoice(body)); msg != "" {
			openAIError(w, http.StatusBadRequest, msg)
			return body, genPlan{}, false
		}
		if m := body.Get("max_completion_tokens"); m.Exists() && m.Type != gjson.Null {
			maxTok = m
		}
		prompt = model.Tokenize(model.RenderChat(openAITurns(body.Get("messages")), toolsRaw(body.Get("tools"))))
	} else {
		var err error
		if prompt, err = completionPrompt(body.Get("prompt")); err != nil {
			openAIError(w, http.StatusBadRequest, err.Error())
			return body, genPlan{}, false
		}
		if !maxTok.Exists() {
			maxTok = gjson.Parse("16") // the completions API default
		}
	}
	p, err := s.plan(prompt, maxTok, "max_tokens", body.Get("ignore_eos").Bool())
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return body, genPlan{}, false
	}
	if chat {
		s.forceToolCall(&p, chatToolChoice(body), chatTools(body))
	}
	p.kv = kvLabels(r, body)
	return body, p, true
}

// completionPrompt accepts a string, a one-element string array, or token ids.
func completionPrompt(p gjson.Result) ([]uint32, error) {
	switch {
	case p.Type == gjson.String:
		return model.Tokenize(p.Str), nil
	case p.IsArray():
		arr := p.Array()
		if len(arr) == 1 && arr[0].Type == gjson.String {
			return model.Tokenize(arr[0].Str), nil
		}
		toks := make([]uint32, 0, len(arr))
		for _, t := range arr {
			if t.Type != gjson.Number {
				return nil, errBadPrompt
			}
			toks = append(toks, uint32(t.Uint()))
		}
		return toks, nil
	}
	return nil, errBadPrompt
}

func (s *server) handleChat(w http.ResponseWriter, r *http.Request)        { s.openAI(w, r, true) }
func (s *server) handleCompletions(w http.ResponseWriter, r *http.Request) { s.openAI(w, r, false) }

func (s *server) openAI(w http.ResponseWriter, r *http.Request, chat bool) {
	body, p, ok := s.openAIPrompt(w, r, chat)
	if !ok {
		return
	}
	proceed, die := s.faultGate(w, r)
	if !proceed {
		return
	}
	if !s.place(r, &p, true, refuseOpenAI(w, body.Get("stream").Bool())) { // vLLM 0.32 honours the rank header here
		return
	}
	id, created, name := newID("chatcmpl-"), time.Now().Unix(), s.answerModel(body)
	object := "chat.completion"
	if !chat {
		id, object = newID("cmpl-"), "text_completion"
	}
	base := func(obj string) map[string]any {
		return map[string]any{"id": id, "object": obj, "created": created, "model": name}
	}
	if body.Get("stream").Bool() {
		includeUsage := s.cfg.ForceUsage || body.Get("stream_options.include_usage").Bool()
		s.openAIStream(r.Context(), w, p, die, chat, includeUsage, base)
		return
	}
	var text string
	req, err := s.run(r.Context(), p, die, func(t string, _ bool) error { text += t; return nil })
	if err != nil {
		return
	}
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": req.StopReason(), "stop_reason": nil}
	switch {
	case chat && p.call != nil:
		// vLLM 0.32's answer to a forced tool call: no content, the call,
		// finish reason stop (it reports tool_calls only for auto).
		choice["message"] = map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
			"id": p.call.id, "type": "function", "function": map[string]any{"name": p.call.name, "arguments": p.call.args}}}}
	case chat:
		choice["message"] = map[string]any{"role": "assistant", "content": text, "tool_calls": []any{}}
	default:
		choice["text"] = text
	}
	resp := base(object)
	resp["choices"] = []any{choice}
	resp["usage"] = s.openAIUsage(s.usageOf(req), chat)
	writeJSON(w, http.StatusOK, resp)
}

func (s *server) openAIStream(ctx context.Context, w http.ResponseWriter, p genPlan, die, chat, includeUsage bool, base func(string) map[string]any) {
	object := "chat.completion.chunk"
	if !chat {
		object = "text_completion"
	}
	var sse *sseWriter
	chunk := func(text string, finish any, role bool) map[string]any {
		c := base(object)
		choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
		if chat {
			delta := map[string]any{"content": text}
			if role {
				delta["role"] = "assistant"
			}
			choice["delta"] = delta
		} else {
			choice["text"] = text
		}
		c["choices"] = []any{choice}
		return c
	}
	// A forced tool call streams as vLLM 0.32 streams one: a chunk with the
	// call's id and name, then its arguments as they are generated, then a
	// chunk with the finish reason alone.
	callChunk := func(tc map[string]any) map[string]any {
		c := base(object)
		c["choices"] = []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": nil,
			"delta": map[string]any{"content": nil, "tool_calls": []any{tc}}}}
		return c
	}
	pos := 0 // bytes of the call's text generated so far
	req, err := s.run(ctx, p, die, func(text string, final bool) error {
		if sse == nil {
			sse = newSSE(w)
			if chat {
				if err := sse.event("", chunk("", nil, true)); err != nil {
					return err
				}
			}
			if p.call != nil {
				if err := sse.event("", callChunk(map[string]any{"id": p.call.id, "type": "function", "index": 0,
					"function": map[string]any{"name": p.call.name}})); err != nil {
					return err
				}
			}
		}
		var finish any
		if final {
			finish = p.stopReason
		}
		if p.call == nil {
			return sse.event("", chunk(text, finish, false))
		}
		if d := p.call.argsIn(pos, pos+len(text)); d != "" {
			if err := sse.event("", callChunk(map[string]any{"index": 0, "function": map[string]any{"arguments": d}})); err != nil {
				return err
			}
		}
		pos += len(text)
		if !final {
			return nil
		}
		c := base(object)
		c["choices"] = []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish, "delta": map[string]any{}}}
		return sse.event("", c)
	})
	if err != nil || sse == nil {
		return
	}
	if includeUsage {
		c := base(object)
		c["choices"] = []any{}
		c["usage"] = s.openAIUsage(s.usageOf(req), chat)
		_ = sse.event("", c)
	}
	_ = sse.event("", "[DONE]")
}
