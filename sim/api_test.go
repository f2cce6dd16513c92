package sim_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/usage"
)

// toolFlags let an engine take coding agents' requests, which carry tools
// (tool_choice auto).
var toolFlags = []string{"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}

// claudeCodeBody is a request in Claude Code's shape (docs/clients.md).
func claudeCodeBody(history []any) map[string]any {
	return map[string]any{
		"model": "test-model", "max_tokens": 24, "stream": true, "ignore_eos": true,
		"system": []any{
			map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli;"},
			map[string]any{"type": "text", "text": words("You are Claude Code", 500), "cache_control": map[string]any{"type": "ephemeral"}},
		},
		"messages":           history,
		"tools":              []any{map[string]any{"name": "Bash", "description": "run", "input_schema": map[string]any{"type": "object"}}},
		"metadata":           map[string]any{"user_id": `{"device_id":"ab","account_uuid":"","session_id":"ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c"}`},
		"thinking":           map[string]any{"type": "adaptive", "display": "omitted"},
		"context_management": map[string]any{"edits": []any{}},
		"output_config":      map[string]any{"effort": "medium"},
	}
}

func TestAnthropicMessagesStreamClaudeCodeShape(t *testing.T) {
	p := simproc.Start(t, append(toolFlags, "--sim-time-scale", fast, "--enable-prompt-tokens-details")...)
	history := []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": words("fix the bug", 300)}}},
		map[string]any{"role": "system", "content": "<env>cwd: /repo</env>"},
		map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "thinking", "thinking": "hmm", "signature": "x"},
			map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": map[string]any{"command": "ls"}},
		}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{map[string]any{"type": "text", "text": "main.go"}}},
		}},
	}
	turn := func(h []any) (names []string, text string, delta sseEvent) {
		evs := readAllEvents(t, postRaw(t, p.URL+"/v1/messages?beta=true", claudeCodeBody(h)))
		for _, ev := range evs {
			if len(names) == 0 || names[len(names)-1] != ev.name {
				names = append(names, ev.name)
			}
			text += ev.data.Get("delta.text").String()
			if ev.name == "message_delta" {
				delta = ev
			}
		}
		return names, text, delta
	}
	names, text, delta := turn(history)
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("event sequence (-want +got):\n%s", diff)
	}
	if got := delta.data.Get("usage.output_tokens").Int(); got != 24 || delta.data.Get("delta.stop_reason").String() != "max_tokens" {
		t.Errorf("message_delta %s, want 24 output tokens and stop_reason max_tokens", delta.raw)
	}
	if delta.data.Get("usage.cache_read_input_tokens").Int() != 0 || delta.data.Get("usage.cache_creation_input_tokens").Int() == 0 {
		t.Errorf("cold turn: %s, want no cache reads and a cache write", delta.raw)
	}
	history = append(history, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": text}}},
		map[string]any{"role": "user", "content": "thanks, now run the tests"})
	_, _, delta = turn(history)
	u := usage.ParseAnthropic(delta.data.Get("usage"))
	if u.Cached < u.Prompt/2 || u.Cached >= u.Prompt {
		t.Errorf("second turn cache_read_input_tokens = %d of a %d-token prompt, want most of it (%s)", u.Cached, u.Prompt, delta.raw)
	}
}

func TestAnthropicMessagesJSON(t *testing.T) {
	p := simproc.Start(t, append(toolFlags, "--sim-time-scale", fast)...)
	body := claudeCodeBody([]any{msg("user", "hi")})
	body["stream"] = false
	code, r := post(t, p.URL+"/v1/messages", body)
	if code != 200 || r.Get("type").String() != "message" || r.Get("content.0.type").String() != "text" ||
		r.Get("usage.output_tokens").Int() != 24 || r.Get("usage.input_tokens").Int() == 0 {
		t.Errorf("non-streaming message: %d %s", code, r.Raw)
	}
}

func TestResponsesStream(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast)
	body := map[string]any{"model": "test-model", "stream": true, "max_output_tokens": 8, "instructions": words("codex", 200),
		"input":            []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": words("task", 200)}}}},
		"prompt_cache_key": "01a22c42-d75f-7393-bcf2-3f3ab22dcead"}
	var text string
	var names []string
	var completed sseEvent
	for i := 0; i < 2; i++ {
		names, text = nil, ""
		for _, ev := range readAllEvents(t, postRaw(t, p.URL+"/v1/responses", body)) {
			names = append(names, ev.name)
			text += ev.data.Get("delta").String()
			if ev.name == "response.completed" {
				completed = ev
			}
		}
	}
	if names[0] != "response.created" || names[len(names)-1] != "response.completed" {
		t.Errorf("events %v, want response.created first and response.completed last", names)
	}
	u := completed.data.Get("response.usage")
	if u.Get("output_tokens").Int() != 8 || u.Get("input_tokens_details.cached_tokens").Int() == 0 {
		t.Errorf("repeated request usage %s, want 8 output tokens and cached input", u.Raw)
	}
	if got := completed.data.Get("response.output.0.content.0.text").String(); got != text {
		t.Errorf("completed text %q != streamed deltas %q", got, text)
	}
}

func TestResetPrefixCache(t *testing.T) {
	if p := simproc.Start(t, "--sim-time-scale", fast); func() int { c, _ := post(t, p.URL+"/reset_prefix_cache", ""); return c }() != http.StatusNotFound {
		t.Error("/reset_prefix_cache served without VLLM_SERVER_DEV_MODE (vLLM serves it in dev mode only)")
	}
	t.Setenv("VLLM_SERVER_DEV_MODE", "1")
	p := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	body := chatBody([]map[string]any{msg("user", words("reset", 200))}, 4)
	post(t, p.URL+"/v1/chat/completions", body)
	if code, r := post(t, p.URL+"/reset_prefix_cache", ""); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, r.Raw)
	}
	if _, r := post(t, p.URL+"/v1/chat/completions", body); r.Get("usage.prompt_tokens_details.cached_tokens").Int() != 0 {
		t.Errorf("hit after reset: %s", r.Get("usage").Raw)
	}
}

func TestResetPrefixCacheRefusedWhileRunning(t *testing.T) {
	t.Setenv("VLLM_SERVER_DEV_MODE", "1")
	p := simproc.Start(t, "--sim-time-scale", "1")
	body := chatBody([]map[string]any{msg("user", "long answer please")}, 5000)
	body["stream"] = true
	resp := postRaw(t, p.URL+"/v1/chat/completions", body)
	defer resp.Body.Close()
	r := newSSEReader(resp.Body)
	r.next()
	r.next() // first token: the request holds blocks now
	if code, _ := post(t, p.URL+"/reset_prefix_cache", ""); code != http.StatusConflict {
		t.Errorf("reset while a request runs: status %d, want 409", code)
	}
}
