package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// vllmLike is a fake engine that validates requests the way vLLM's own
// request models do (vllm/entrypoints/anthropic/protocol.py: AnthropicTool
// needs input_schema; message roles user/assistant/system; content block
// types text/image/tool_use/tool_result/tool_reference/thinking/
// redacted_thinking; the OpenAI serving layer's max_tokens check against the
// context left), answers with vLLM's error bodies, has no
// /v1/messages/count_tokens route (FastAPI's 404 {"detail":"Not Found"}) and
// serves POST /tokenize. Input tokens are a quarter of the prompt's bytes.
type vllmLike struct {
	srv      *httptest.Server
	ctx      int  // max_model_len
	countAPI bool // serve /v1/messages/count_tokens itself
	v032     bool // vLLM 0.32's length checks (renderers/params.py) instead of the older serving layer's

	mu     sync.Mutex
	got    []string // request bodies, in order
	paths  []string
	sent   string // the last response body
	tokens string // the last /tokenize body
}

func newVLLMLike(t *testing.T) *vllmLike {
	v := &vllmLike{ctx: 4096}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vllmLike) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	v.got, v.paths = append(v.got, string(b)), append(v.paths, r.URL.Path)
	v.mu.Unlock()
	body := gjson.ParseBytes(b)
	code, out := 200, ""
	switch {
	case r.URL.Path == "/health" || r.URL.Path == "/metrics":
		return
	case r.URL.Path == "/v1/messages" || (r.URL.Path == "/v1/messages/count_tokens" && v.countAPI):
		code, out = v.messages(body, r.URL.Path == "/v1/messages")
	case r.URL.Path == "/v1/chat/completions":
		code, out = v.chat(body)
	case r.URL.Path == "/tokenize":
		v.mu.Lock()
		v.tokens = string(b)
		v.mu.Unlock()
		out = fmt.Sprintf(`{"count":%d,"max_model_len":%d,"tokens":[]}`, len(body.Get("messages").Raw)/4, v.ctx)
	default:
		code, out = 404, `{"detail":"Not Found"}`
	}
	v.mu.Lock()
	v.sent = out
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	io.WriteString(w, out)
}

func validationError(loc, msg string) (int, string) {
	return 400, fmt.Sprintf(`{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', %s), 'msg': '%s'}","type":"Bad Request","param":null,"code":400}}`, loc, msg)
}

var anthropicBlockTypes = map[string]bool{"text": true, "image": true, "tool_use": true, "tool_result": true,
	"tool_reference": true, "thinking": true, "redacted_thinking": true}

func (v *vllmLike) messages(b gjson.Result, generate bool) (int, string) {
	for i, t := range b.Get("tools").Array() {
		if !t.Get("input_schema").Exists() {
			return validationError(fmt.Sprintf("'tools', %d, 'input_schema'", i), "Field required")
		}
	}
	for i, m := range b.Get("messages").Array() {
		if r := m.Get("role").Str; r != "user" && r != "assistant" && r != "system" {
			return validationError(fmt.Sprintf("'messages', %d, 'role'", i), "Input should be 'user', 'assistant' or 'system'")
		}
		for j, c := range m.Get("content").Array() {
			if c.IsObject() && !anthropicBlockTypes[c.Get("type").Str] { // a string content is one string
				return validationError(fmt.Sprintf("'messages', %d, 'content', %d, 'type'", i, j), "Input should be 'text', 'image', ...")
			}
		}
	}
	in := v.inputTokens(b)
	if !generate {
		return 200, fmt.Sprintf(`{"input_tokens":%d}`, in)
	}
	if code, msg := v.checkLength(in, b.Get("max_tokens").Int(), "max_completion_tokens"); code != 200 {
		return code, fmt.Sprintf(`{"type":"error","error":{"type":"BadRequestError","message":%q}}`, msg)
	}
	return 200, `{"id":"msg_1","type":"message","role":"assistant","model":"served-model","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":1,"output_tokens":1}}`
}

func (v *vllmLike) chat(b gjson.Result) (int, string) {
	want := b.Get("max_completion_tokens").Int()
	if want == 0 {
		want = b.Get("max_tokens").Int()
	}
	param := "max_tokens"
	if b.Get("max_completion_tokens").Exists() {
		param = "max_completion_tokens"
	}
	if code, msg := v.checkLength(v.inputTokens(b), want, param); code != 200 {
		return code, fmt.Sprintf(`{"error":{"message":%q,"type":"BadRequestError","param":"max_tokens","code":400}}`, msg)
	}
	return 200, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`
}

func (v *vllmLike) inputTokens(b gjson.Result) int {
	return (len(b.Get("system").Raw) + len(b.Get("messages").Raw) + len(b.Get("tools").Raw)) / 4
}

// checkLength is vLLM's context check, with its messages. vLLM 0.32 names
// the output limit as param (Messages: max_completion_tokens) and clamps a
// limit up to max_model_len to the context left.
func (v *vllmLike) checkLength(in int, maxTokens int64, param string) (int, string) {
	if v.v032 {
		switch {
		case in > v.ctx:
			return 400, fmt.Sprintf("This model's maximum context length is %d tokens. However, your prompt contains %d input tokens, "+
				"which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=%d)", v.ctx, in, in)
		case maxTokens > int64(v.ctx):
			return 400, fmt.Sprintf("%s=%d cannot be greater than max_model_len=%d. Please request fewer output tokens. (parameter=%s, value=%d)",
				param, maxTokens, v.ctx, param, maxTokens)
		}
		return 200, ""
	}
	if in >= v.ctx {
		return 400, fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", v.ctx, in)
	}
	if maxTokens > int64(v.ctx-in) {
		return 400, fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d). (parameter=max_tokens, value=%d)",
			maxTokens, v.ctx, in, maxTokens, v.ctx, in, maxTokens)
	}
	return 200, ""
}

func (v *vllmLike) requests() (bodies, paths []string, last string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.got...), append([]string(nil), v.paths...), v.sent
}

func (v *vllmLike) proxy(t *testing.T) string {
	_, front := testProxyBackends(t, Config{ServedModel: "served-model"}, []Backend{{Rank: 0, URL: v.srv.URL, MaxNumSeqs: 32}})
	return front.URL
}

// claudeTools is Claude Code's tool list shape plus Anthropic server tools.
const (
	bashTool      = `{"name":"Bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}`
	readTool      = `{"name":"Read","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}},"defer_loading":false}`
	webSearchTool = `{"type":"web_search_20250305","name":"web_search","max_uses":5}`
	toolSearch    = `{"type":"tool_search_tool_regex_20251119","name":"tool_search_tool_regex"}`
)

// claudeBody is a Claude Code main-loop request with the fields it sends
// that vLLM ignores (thinking adaptive, context_management, output_config,
// cache_control, a mid-conversation system message).
func claudeBody(maxTokens int, tools string, firstContent string) string {
	return `{"model":"` + claudeMain + `","max_tokens":` + fmt.Sprint(maxTokens) + `,` +
		`"thinking":{"type":"adaptive","display":"omitted"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},` +
		`"output_config":{"effort":"medium"},"metadata":{"user_id":"{\"device_id\":\"ab\",\"account_uuid\":\"\",\"session_id\":\"s-1\"}"},` +
		`"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":` + firstContent + `},{"role":"system","content":"<env>linux</env>"}],` +
		`"tools":[` + tools + `]}`
}

func TestAdaptationAgainstAVLLMLikeEngine(t *testing.T) {
	text := `[{"type":"text","text":"list the files","cache_control":{"type":"ephemeral"}}]`
	long := `"` + strings.Repeat("word ", 4000) + `"` // ~5000 tokens: over the context alone
	doc := `[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}},{"type":"text","text":"summarise"}]`
	cases := []struct {
		name, path, body string
		status           int
		engineCalls      int
		unchanged        bool                            // the client gets the engine's own error body
		v032             bool                            // the engine checks lengths as vLLM 0.32 does
		check            func(t *testing.T, last string) // the last body the engine got
	}{
		{name: "fields vLLM ignores pass untouched", path: "/v1/messages?beta=true",
			body: claudeBody(1024, bashTool+","+readTool, text), status: 200, engineCalls: 1,
			check: func(t *testing.T, last string) {
				for _, k := range []string{"thinking", "context_management", "output_config", "metadata", "system", "messages", "tools"} {
					if want := gjson.Get(claudeBody(1024, bashTool+","+readTool, text), k).Raw; gjson.Get(last, k).Raw != want {
						t.Errorf("%s changed: %s", k, gjson.Get(last, k).Raw)
					}
				}
			}},
		{name: "server tools dropped, custom tools kept", path: "/v1/messages",
			body: claudeBody(1024, webSearchTool+","+bashTool+","+toolSearch+","+readTool, text), status: 200, engineCalls: 1,
			check: func(t *testing.T, last string) {
				if got := gjson.Get(last, "tools.#.name").Raw; got != `["Bash","Read"]` {
					t.Errorf("tools sent: %s", got)
				}
			}},
		{name: "only server tools: the tools key goes", path: "/v1/messages",
			body: claudeBody(1024, webSearchTool, text), status: 200, engineCalls: 1,
			check: func(t *testing.T, last string) {
				if gjson.Get(last, "tools").Exists() {
					t.Errorf("tools still sent: %s", gjson.Get(last, "tools").Raw)
				}
			}},
		{name: "max_tokens 128000 lowered to the context left", path: "/v1/messages?beta=true",
			body: claudeBody(128000, bashTool, text), status: 200, engineCalls: 2,
			check: func(t *testing.T, last string) {
				b := gjson.Parse(last)
				in := (len(b.Get("system").Raw) + len(b.Get("messages").Raw) + len(b.Get("tools").Raw)) / 4
				if got := b.Get("max_tokens").Int(); got != int64(4096-in) {
					t.Errorf("retried with max_tokens %d, want %d", got, 4096-in)
				}
			}},
		{name: "chat max_completion_tokens lowered too", path: "/v1/chat/completions",
			body: `{"model":"` + codexModel + `","max_completion_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`, status: 200, engineCalls: 2,
			check: func(t *testing.T, last string) {
				if got := gjson.Get(last, "max_completion_tokens").Int(); got < 4000 || got > 4096 {
					t.Errorf("retried with max_completion_tokens %d", got)
				}
			}},
		{name: "vLLM 0.32: max_tokens 32000 retried with max_model_len, which the engine clamps", path: "/v1/messages?beta=true",
			body: claudeBody(32000, bashTool, text), status: 200, engineCalls: 2, v032: true,
			check: func(t *testing.T, last string) {
				if got := gjson.Get(last, "max_tokens").Int(); got != 4096 {
					t.Errorf("retried with max_tokens %d, want 4096 (max_model_len)", got)
				}
			}},
		{name: "vLLM 0.32: chat max_completion_tokens too", path: "/v1/chat/completions", v032: true,
			body: `{"model":"` + codexModel + `","max_completion_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`, status: 200, engineCalls: 2,
			check: func(t *testing.T, last string) {
				if got := gjson.Get(last, "max_completion_tokens").Int(); got != 4096 {
					t.Errorf("retried with max_completion_tokens %d, want 4096", got)
				}
			}},
		{name: "vLLM 0.32: prompt over the context alone: engine error unchanged", path: "/v1/messages", v032: true,
			body: claudeBody(1024, bashTool, long), status: 400, engineCalls: 1, unchanged: true},
		{name: "prompt over the context alone: engine error unchanged", path: "/v1/messages",
			body: claudeBody(128000, bashTool, long), status: 400, engineCalls: 1, unchanged: true},
		{name: "a block type vLLM lacks (document): engine error unchanged", path: "/v1/messages",
			body: claudeBody(1024, bashTool, doc), status: 400, engineCalls: 1, unchanged: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newVLLMLike(t)
			v.v032 = tc.v032
			resp, body := post(t, v.proxy(t)+tc.path, tc.body)
			bodies, paths, last := v.requests()
			var gen []string
			for i, p := range paths {
				if p != "/health" && p != "/metrics" {
					gen = append(gen, bodies[i])
				}
			}
			if resp.StatusCode != tc.status || len(gen) != tc.engineCalls {
				t.Fatalf("status %d (want %d), engine calls %d (want %d): %s", resp.StatusCode, tc.status, len(gen), tc.engineCalls, body)
			}
			if tc.unchanged && body != last {
				t.Errorf("client got %s\nengine sent %s", body, last)
			}
			if gjson.Get(gen[len(gen)-1], "model").Str != "served-model" {
				t.Errorf("model not mapped: %s", gjson.Get(gen[len(gen)-1], "model").Raw)
			}
			if tc.check != nil {
				tc.check(t, gen[len(gen)-1])
			}
		})
	}
}

// countBody is Claude Code's count_tokens body (model, messages, tools; no
// metadata) with a tool round trip and a system message.
const countBody = `{"model":"` + claudeMain + `","messages":[` +
	`{"role":"user","content":"read a"},{"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1;"},{"type":"text","text":"env"}]},` +
	`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"reading"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a"}}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"A!"}]},{"type":"text","text":"thanks"}]}],` +
	`"tools":[` + readTool + `,` + webSearchTool + `]}`

func TestCountTokensFallsBackToTokenize(t *testing.T) {
	v := newVLLMLike(t)
	resp, body := post(t, v.proxy(t)+"/v1/messages/count_tokens?beta=true", countBody,
		"X-Claude-Code-Session-Id", "s-1", "anthropic-beta", "token-counting-2024-11-01")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	v.mu.Lock()
	tok := v.tokens
	v.mu.Unlock()
	want := `{"add_generation_prompt":true,"messages":[` +
		`{"role":"system","content":"env"},{"role":"user","content":"read a"},` +
		`{"role":"assistant","content":"reading","tool_calls":[{"id":"t1","type":"function","function":{"name":"Read","arguments":"{\"path\":\"a\"}"}}]},` +
		`{"role":"tool","content":"A!","tool_call_id":"t1"},{"role":"user","content":"thanks"}],"model":"served-model",` +
		`"tools":[{"function":{"description":"Read a file","name":"Read","parameters":{"type":"object","properties":{"path":{"type":"string"}}}},"type":"function"}]}`
	if diff := cmp.Diff(gjson.Parse(want).Value(), gjson.Parse(tok).Value()); diff != "" {
		t.Errorf("tokenize request (-want +got):\n%s", diff)
	}
	if wantCount := len(gjson.Get(tok, "messages").Raw) / 4; body != fmt.Sprintf(`{"input_tokens":%d}`, wantCount) {
		t.Errorf("answer %s, want input_tokens %d", body, wantCount)
	}
}

func TestCountTokensUsesTheEngineRouteWhenThere(t *testing.T) {
	v := newVLLMLike(t)
	v.countAPI = true
	resp, body := post(t, v.proxy(t)+"/v1/messages/count_tokens", countBody)
	_, paths, last := v.requests()
	if resp.StatusCode != 200 || body != last || strings.Contains(strings.Join(paths, " "), "/tokenize") {
		t.Errorf("status %d body %s (engine sent %s), paths %v", resp.StatusCode, body, last, paths)
	}
}

func TestCountTokensEngineErrorIsNotMasked(t *testing.T) {
	// A 404 that is an engine error (unknown model: no mapping configured)
	// is the answer; the tokenizer is not asked.
	e := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			t.Errorf("tokenize called")
		}
		w.WriteHeader(404)
		io.WriteString(w, `{"type":"error","error":{"type":"NotFoundError","message":"The model `+"`x`"+` does not exist."}}`)
	}))
	defer e.Close()
	_, front := testProxyBackends(t, Config{}, []Backend{{Rank: 0, URL: e.URL, MaxNumSeqs: 32}})
	resp, body := post(t, front.URL+"/v1/messages/count_tokens", countBody)
	if resp.StatusCode != 404 || !strings.Contains(body, "does not exist") {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
}
