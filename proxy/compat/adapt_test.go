package compat_test

// Compatibility as a client sees it through the warden: the request
// adaptations (compat.Clients) and the engine fallbacks (compat.Transport)
// against a vLLM-like engine.

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
)

// lastModel is the model name of the last request the engine got.
func lastModel(e *vllmLike) string {
	gen := e.generated()
	if len(gen) == 0 {
		return ""
	}
	return gjson.Get(gen[len(gen)-1], "model").Str
}

func TestModelNamesMapToTheServedModel(t *testing.T) {
	e := newVLLMLike(t)
	logs := &simproc.SyncBuffer{}
	url := front(t, router.Config{ServedModel: "served-model", Logger: slog.New(slog.NewTextHandler(logs, nil))}, e.srv.URL)
	for range 2 {
		for _, m := range []string{claudeMain, claudeSmall} {
			if resp, body := post(t, url+"/v1/messages?beta=true", anthropicBody(m)); resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", m, resp.StatusCode, body)
			}
			if got := lastModel(e); got != "served-model" {
				t.Errorf("%s reached the engine as model %q", m, got)
			}
		}
		if resp, body := post(t, url+"/v1/chat/completions", `{"model":"`+codexModel+`","messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != 200 {
			t.Fatalf("chat: %d %s", resp.StatusCode, body)
		}
		if got := lastModel(e); got != "served-model" {
			t.Errorf("chat reached the engine as model %q", got)
		}
	}
	// The served name itself is not a mapping.
	post(t, url+"/v1/messages", anthropicBody("served-model"))
	out := logs.String()
	for _, m := range []string{claudeMain, claudeSmall, codexModel} {
		if n := strings.Count(out, "requested="+m); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", m, n, out)
		}
	}
	if n := strings.Count(out, "model name mapped"); n != 3 {
		t.Errorf("%d mapping lines, want 3:\n%s", n, out)
	}
}

func TestStrictModelRefusesOtherNamesLikeVLLM(t *testing.T) {
	e := newVLLMLike(t)
	url := front(t, router.Config{ServedModel: "served-model", StrictModel: true}, e.srv.URL)
	resp, body := post(t, url+"/v1/messages?beta=true", anthropicBody(claudeMain))
	want := map[string]any{"type": "error", "error": map[string]any{"type": "NotFoundError",
		"message": "The model `" + claudeMain + "` does not exist. This warden serves `served-model` (--strict-model refuses other names)."}}
	if resp.StatusCode != 404 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if diff := cmp.Diff(want, gjson.Parse(body).Value()); diff != "" {
		t.Errorf("anthropic 404 (-want +got):\n%s", diff)
	}
	resp, body = post(t, url+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 404 || gjson.Get(body, "error.type").Str != "NotFoundError" || gjson.Get(body, "error.code").Int() != 404 {
		t.Errorf("chat: %d %s", resp.StatusCode, body)
	}
	if n := len(e.generated()); n != 0 {
		t.Errorf("refused requests reached the engine: %d", n)
	}
	if resp, body := post(t, url+"/v1/messages", anthropicBody("served-model")); resp.StatusCode != 200 {
		t.Errorf("the served name was refused: %d %s", resp.StatusCode, body)
	}
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
			_, _, last := v.requests()
			gen := v.generated()
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
	resp, body := post(t, front(t, router.Config{}, e.URL)+"/v1/messages/count_tokens", countBody)
	if resp.StatusCode != 404 || !strings.Contains(body, "does not exist") {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
}
