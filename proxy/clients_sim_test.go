package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
)

// claudeHeaders are the headers Claude Code 2.1.332 sends on every Messages
// request (docs/clients.md, captured live), with a dummy key.
func claudeHeaders(session string) []string {
	return []string{
		"Accept", "application/json",
		"User-Agent", "claude-cli/2.1.332 (external, sdk-cli)",
		"X-Claude-Code-Session-Id", session,
		"X-Stainless-Lang", "js", "X-Stainless-Package-Version", "0.128.0", "X-Stainless-Retry-Count", "0", "X-Stainless-Timeout", "600",
		"anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,advanced-tool-use-2025-11-20,effort-2025-11-24",
		"anthropic-dangerous-direct-browser-access", "true",
		"anthropic-version", "2023-06-01",
		"x-api-key", "sk-dummy",
		"x-app", "cli",
	}
}

// Claude Code's tool list shape and an Anthropic server tool (as the compat
// tests' fixture has them).
const (
	bashTool      = `{"name":"Bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}`
	readTool      = `{"name":"Read","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}},"defer_loading":false}`
	webSearchTool = `{"type":"web_search_20250305","name":"web_search","max_uses":5}`
)

// claudeCodeTurn1 is Claude Code's main-loop body (docs/clients.md): its own
// model name, billing block, the static system prompt, a mid-conversation
// system message, tools (one an Anthropic server tool), metadata.user_id as
// a JSON string, adaptive thinking, context management, effort, 128k
// max_tokens, streaming.
func claudeCodeTurn1(session, system, first string) string {
	b := `{"model":"claude-opus-5-5","max_tokens":128000,"stream":true,` +
		`"thinking":{"type":"adaptive","display":"omitted"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},` +
		`"output_config":{"effort":"medium"},"messages":[],"system":[],"tools":[` + bashTool + `,` + readTool + `,` + webSearchTool + `]}`
	b, _ = sjson.Set(b, "metadata.user_id", `{"device_id":"11b3fc84f988896cf18331a55877f8cd771bdee8781f603da60ce60495938abd","account_uuid":"","session_id":"`+session+`"}`)
	b, _ = sjson.Set(b, "system.-1", map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"})
	b, _ = sjson.Set(b, "system.-1", map[string]any{"type": "text", "text": system, "cache_control": map[string]string{"type": "ephemeral"}})
	b, _ = sjson.Set(b, "messages.-1", map[string]any{"role": "user", "content": []map[string]any{{"type": "text", "text": first}}})
	b, _ = sjson.Set(b, "messages.-1", map[string]any{"role": "system", "content": "<env>Working directory: /tmp/x</env>"})
	return b
}

// sseUsage reads an Anthropic stream's usage: input and cached tokens.
func sseUsage(body string) (text string, input, cached int64) {
	for _, line := range strings.Split(body, "\n") {
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		text += gjson.Get(d, "delta.text").Str
		if u := gjson.Get(d, "usage"); u.Exists() && gjson.Get(d, "type").Str == "message_delta" {
			input, cached = u.Get("input_tokens").Int(), u.Get("cache_read_input_tokens").Int()
		}
	}
	return text, input, cached
}

func TestSimClaudeCodeTwoTurnsThroughTheWarden(t *testing.T) {
	_, bs := startSims(t, 2, "--sim-output-tokens", "8")
	p, front := testProxyBackends(t, testConfig{Config: router.Config{ServedModel: "test-model"}}, bs)
	if resp, err := http.Head(front.URL + "/api/hello"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD /api/hello: %v %v", resp, err)
	}
	const session = "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c"
	body := claudeCodeTurn1(session, words("claude", 1500), words("task", 200))
	var home string
	for turn := 1; turn <= 2; turn++ {
		resp, out := post(t, front.URL+"/v1/messages?beta=true", body, claudeHeaders(session)...)
		text, input, cached := sseUsage(out)
		t.Logf("turn %d: replica %s (%s), %d/%d input tokens cached", turn, resp.Header.Get(identity.PinHeader), resp.Header.Get(routeHeader), cached, input)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || text == "" {
			t.Fatalf("turn %d: status %d %s: %s", turn, resp.StatusCode, resp.Header.Get("Content-Type"), out)
		}
		switch turn {
		case 1:
			home = resp.Header.Get(identity.PinHeader)
			if resp.Header.Get(routeHeader) != "new" {
				t.Errorf("turn 1 route %s", resp.Header.Get(routeHeader))
			}
		case 2:
			if r := resp.Header.Get(identity.PinHeader); r != home || resp.Header.Get(routeHeader) != "sticky" {
				t.Errorf("turn 2 on replica %s (%s), turn 1 on %s", r, resp.Header.Get(routeHeader), home)
			}
			if cached < input*8/10 {
				t.Errorf("turn 2: only %d of %d input tokens cached", cached, input)
			}
		}
		body, _ = sjson.Set(body, "messages.-1", map[string]any{"role": "assistant", "content": []map[string]any{{"type": "text", "text": text}}})
		body, _ = sjson.Set(body, "messages.-1", map[string]any{"role": "user", "content": words("next", 30)})
	}
	// /context's count_tokens burst: the header carries the session, the
	// body has only model, messages and tools.
	cb := `{"model":"claude-opus-5-5","messages":` + gjson.Get(body, "messages").Raw + `,"tools":` + gjson.Get(body, "tools").Raw + `}`
	resp, out := post(t, front.URL+"/v1/messages/count_tokens?beta=true", cb, claudeHeaders(session)...)
	if n := gjson.Get(out, "input_tokens").Int(); resp.StatusCode != 200 || n < 200 {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, out)
	}
	settled(t, p)
	if st := coreOf(p).Status(); st.SessionsSeen != 1 || st.StickyShare != 1 {
		t.Errorf("status: %d sessions, sticky share %v", st.SessionsSeen, st.StickyShare)
	}
}

func TestSimCodexResponsesTwoTurns(t *testing.T) {
	_, bs := startSims(t, 2, "--sim-output-tokens", "8")
	_, front := testProxyBackends(t, testConfig{Config: router.Config{ServedModel: "test-model"}}, bs)
	const session = "01a22c42-d75f-7393-bcf2-3f3ab22dcead"
	body := `{"model":"gpt-5.1-codex","stream":true,"store":false,"parallel_tool_calls":false,"tool_choice":"auto",` +
		`"reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"],` +
		`"prompt_cache_key":"` + session + `","client_metadata":{"session_id":"` + session + `"},"instructions":"` + words("codex", 800) + `","input":[]}`
	var homes []string
	var cached []int64
	for turn := range 2 {
		body, _ = sjson.Set(body, "input.-1", map[string]any{"type": "message", "role": "user",
			"content": []map[string]string{{"type": "input_text", "text": words("ask"+strconv.Itoa(turn), 100)}}})
		resp, out := post(t, front.URL+"/v1/responses", body, "session-id", session, "thread-id", session,
			"originator", "codex_exec", "Authorization", "Bearer sk-dummy", "Accept", "text/event-stream")
		if resp.StatusCode != 200 || !strings.Contains(out, "response.completed") {
			t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, out)
		}
		var done gjson.Result
		for _, l := range strings.Split(out, "\n") {
			if d, ok := strings.CutPrefix(l, "data: "); ok && gjson.Get(d, "type").Str == "response.completed" {
				done = gjson.Get(d, "response")
			}
		}
		homes = append(homes, resp.Header.Get(identity.PinHeader))
		cached = append(cached, done.Get("usage.input_tokens_details.cached_tokens").Int())
		body, _ = sjson.Set(body, "input.-1", map[string]any{"type": "message", "role": "assistant",
			"content": []map[string]string{{"type": "output_text", "text": done.Get("output.0.content.0.text").Str}}})
	}
	if homes[0] != homes[1] || cached[1] < 800 {
		t.Errorf("replicas %v, cached tokens per turn %v", homes, cached)
	}
}
