package sim

import (
	"net/http"
	"time"

	"github.com/lmwarden/warden/sim/model"
	"github.com/tidwall/gjson"
)

// /v1/responses: enough of the Responses API for a streaming agent turn
// (Codex): response.created, output_text deltas, response.completed with
// usage including input_tokens_details.cached_tokens.

func (s *server) handleResponses(w http.ResponseWriter, r *http.Request) {
	raw, ok := s.readBody(w, r, false)
	if !ok {
		return
	}
	body := gjson.ParseBytes(raw)
	if err := s.checkModel(body.Get("model").String()); err != nil {
		openAIError(w, http.StatusNotFound, err.Error())
		return
	}
	p, err := s.plan(model.Tokenize(model.RenderChat(responsesTurns(body), toolsRaw(body.Get("tools")))), body.Get("max_output_tokens"), "max_output_tokens", body.Get("ignore_eos").Bool())
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	p.kv = kvLabels(r, body)
	// vLLM 0.32's Responses API does not refuse a tool choice without a
	// tool parser (it answers in text); with one, a named or required
	// choice is a function_call item.
	s.forceToolCall(&p, responsesToolChoice(body), responsesTools(body))
	proceed, die := s.faultGate(w, r)
	if !proceed {
		return
	}
	// vLLM 0.32's Responses API does not read X-data-parallel-rank (its
	// serving.py passes no data_parallel_rank to generate; measured: rank 1
	// requests went 1,0,1,0): the balancer places every request.
	s.place(r, &p, false, nil)
	name := s.answerModel(body)
	rs := &responseState{id: newID("resp_"), itemID: newID("msg_"), model: name, created: time.Now().Unix(), call: p.call}
	if p.call != nil {
		rs.itemID = p.call.itemID
	}
	if body.Get("stream").Bool() {
		s.responsesStream(w, r, p, die, rs)
		return
	}
	var text string
	req, err := s.run(r.Context(), p, die, func(t string, _ bool) error { text += t; return nil })
	if err != nil {
		return
	}
	writeJSON(w, http.StatusOK, rs.object("completed", text, s.responsesUsage(s.usageOf(req))))
}

type responseState struct {
	id, itemID, model string
	created           int64
	seq               int
	call              *toolCallOut // the function call the output is, nil for text
}

func (rs *responseState) item(status, text string, done bool) map[string]any {
	if c := rs.call; c != nil {
		args := ""
		if done {
			args = c.args
		}
		return map[string]any{"arguments": args, "call_id": c.id, "name": c.name, "type": "function_call", "id": c.itemID, "status": status}
	}
	content := []any{}
	if done {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}
	}
	return map[string]any{"id": rs.itemID, "type": "message", "status": status, "role": "assistant", "content": content}
}

func (rs *responseState) object(status, text string, usage any) map[string]any {
	output := []any{}
	if status == "completed" {
		output = []any{rs.item("completed", text, true)}
	}
	return map[string]any{"id": rs.id, "object": "response", "created_at": rs.created, "status": status,
		"model": rs.model, "output": output, "usage": usage}
}

func (s *server) responsesUsage(u usage) map[string]any {
	return map[string]any{
		"input_tokens": u.prompt, "input_tokens_details": map[string]any{"cached_tokens": u.cached, "cache_write_tokens": u.created},
		"output_tokens": u.completion, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": u.prompt + u.completion,
	}
}

func (s *server) responsesStream(w http.ResponseWriter, r *http.Request, p genPlan, die bool, rs *responseState) {
	var sse *sseWriter
	send := func(typ string, fields map[string]any) error {
		fields["type"] = typ
		fields["sequence_number"] = rs.seq
		rs.seq++
		return sse.event(typ, fields)
	}
	var full string
	req, err := s.run(r.Context(), p, die, func(text string, final bool) error {
		if sse == nil {
			sse = newSSE(w)
			type ev struct {
				typ    string
				fields map[string]any
			}
			evs := []ev{
				{"response.created", map[string]any{"response": rs.object("in_progress", "", nil)}},
				{"response.in_progress", map[string]any{"response": rs.object("in_progress", "", nil)}},
				{"response.output_item.added", map[string]any{"output_index": 0, "item": rs.item("in_progress", "", false)}},
			}
			if rs.call == nil {
				evs = append(evs, ev{"response.content_part.added", map[string]any{"item_id": rs.itemID, "output_index": 0, "content_index": 0,
					"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}})
			}
			for _, e := range evs {
				if err := send(e.typ, e.fields); err != nil {
					return err
				}
			}
		}
		if c := rs.call; c != nil {
			d := c.argsIn(len(full), len(full)+len(text))
			full += text
			if d == "" {
				return nil
			}
			return send("response.function_call_arguments.delta", map[string]any{"item_id": rs.itemID, "output_index": 0, "delta": d})
		}
		full += text
		return send("response.output_text.delta", map[string]any{"item_id": rs.itemID, "output_index": 0, "content_index": 0, "delta": text})
	})
	if err != nil || sse == nil {
		return
	}
	if c := rs.call; c != nil {
		_ = send("response.function_call_arguments.done", map[string]any{"item_id": rs.itemID, "output_index": 0, "arguments": c.args, "name": c.name})
		_ = send("response.output_item.done", map[string]any{"output_index": 0, "item": rs.item("completed", "", true)})
		_ = send("response.completed", map[string]any{"response": rs.object("completed", "", s.responsesUsage(s.usageOf(req)))})
		return
	}
	_ = send("response.output_text.done", map[string]any{"item_id": rs.itemID, "output_index": 0, "content_index": 0, "text": full})
	_ = send("response.content_part.done", map[string]any{"item_id": rs.itemID, "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": full, "annotations": []any{}}})
	_ = send("response.output_item.done", map[string]any{"output_index": 0, "item": rs.item("completed", full, true)})
	_ = send("response.completed", map[string]any{"response": rs.object("completed", full, s.responsesUsage(s.usageOf(req)))})
}
