package compat_test

// The compat tests' fixture: a vLLM-like engine and a warden in front of
// it, with the request shapes the clients send.

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
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

// generated is the bodies of the requests the engine got on its API (not
// health checks or scrapes), in order.
func (v *vllmLike) generated() []string {
	bodies, paths, _ := v.requests()
	var gen []string
	for i, p := range paths {
		if p != "/health" && p != "/metrics" {
			gen = append(gen, bodies[i])
		}
	}
	return gen
}

// proxy is a warden serving "served-model" in front of the engine.
func (v *vllmLike) proxy(t *testing.T) string {
	return front(t, router.Config{ServedModel: "served-model"}, v.srv.URL)
}

// front is a warden whose core has cfg (quiet unless it has a logger) in
// front of the engine at url; it returns the warden's URL.
func front(t *testing.T, cfg router.Config, url string) string {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Registry, cfg.Seed = prometheus.NewPedanticRegistry(), 1
	core, err := router.New(cfg, []router.Backend{{Rank: 0, URL: url, MaxNumSeqs: 32}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(core, proxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// post sends a JSON body with headers (name, value pairs, kept as written)
// and returns the response with its body read.
func post(t *testing.T, url, body string, kv ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i < len(kv); i += 2 {
		req.Header[kv[i]] = []string{kv[i+1]}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Names Claude Code sends for its main loop and its small background model
// (titles, summaries), and Codex's.
const (
	claudeMain  = "claude-sonnet-4-6"
	claudeSmall = "claude-haiku-4-5-20251001"
	codexModel  = "gpt-5.1-codex"
)

func anthropicBody(model string) string {
	return `{"model":"` + model + `","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
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

// countBody is Claude Code's count_tokens body (model, messages, tools; no
// metadata) with a tool round trip and a system message.
const countBody = `{"model":"` + claudeMain + `","messages":[` +
	`{"role":"user","content":"read a"},{"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1;"},{"type":"text","text":"env"}]},` +
	`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"reading"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a"}}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"A!"}]},{"type":"text","text":"thanks"}]}],` +
	`"tools":[` + readTool + `,` + webSearchTool + `]}`
