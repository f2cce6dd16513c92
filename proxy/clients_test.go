package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/proxy/identity"
)

// Names Claude Code sends for its main loop and its small background model
// (titles, summaries), Codex's and opencode's.
const (
	claudeMain  = "claude-sonnet-4-6"
	claudeSmall = "claude-haiku-4-5-20251001"
	codexModel  = "gpt-5.1-codex"
)

func anthropicBody(model string) string {
	return `{"model":"` + model + `","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
}

func TestModelNamesMapToTheServedModel(t *testing.T) {
	e := newFakeEngine(t)
	logs := &simproc.SyncBuffer{}
	_, front := testProxy(t, Config{ServedModel: "served-model", Logger: slog.New(slog.NewTextHandler(logs, nil))}, e)
	for range 2 {
		for _, m := range []string{claudeMain, claudeSmall} {
			if resp, body := post(t, front.URL+"/v1/messages?beta=true", anthropicBody(m)); resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", m, resp.StatusCode, body)
			}
			if got := gjson.Get(e.lastBody(), "model").Str; got != "served-model" {
				t.Errorf("%s reached the engine as model %q", m, got)
			}
		}
		if resp, body := post(t, front.URL+"/v1/chat/completions", `{"model":"`+codexModel+`","messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != 200 {
			t.Fatalf("chat: %d %s", resp.StatusCode, body)
		}
		if got := gjson.Get(e.lastBody(), "model").Str; got != "served-model" {
			t.Errorf("chat reached the engine as model %q", got)
		}
	}
	// The served name itself is not a mapping.
	post(t, front.URL+"/v1/messages", anthropicBody("served-model"))
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
	e := newFakeEngine(t)
	_, front := testProxy(t, Config{ServedModel: "served-model", StrictModel: true}, e)
	resp, body := post(t, front.URL+"/v1/messages?beta=true", anthropicBody(claudeMain))
	want := map[string]any{"type": "error", "error": map[string]any{"type": "NotFoundError",
		"message": "The model `" + claudeMain + "` does not exist."}}
	if resp.StatusCode != 404 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if diff := cmp.Diff(want, gjson.Parse(body).Value()); diff != "" {
		t.Errorf("anthropic 404 (-want +got):\n%s", diff)
	}
	resp, body = post(t, front.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 404 || gjson.Get(body, "error.type").Str != "NotFoundError" || gjson.Get(body, "error.code").Int() != 404 {
		t.Errorf("chat: %d %s", resp.StatusCode, body)
	}
	if e.count() != 0 {
		t.Errorf("refused requests reached the engine: %d", e.count())
	}
	if resp, body := post(t, front.URL+"/v1/messages", anthropicBody("served-model")); resp.StatusCode != 200 {
		t.Errorf("the served name was refused: %d %s", resp.StatusCode, body)
	}
}

func TestMappingKeepsSessionIdentityAcrossNames(t *testing.T) {
	turn1 := `{"model":"` + claudeMain + `","system":"sys","messages":[{"role":"user","content":"task"}]}`
	turn2 := `{"model":"` + claudeSmall + `","system":"sys","messages":[{"role":"user","content":"task"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}`
	keys := func(served string) (identity.SessionKey, identity.SessionKey) {
		p, _ := testProxy(t, Config{ServedModel: served}, newFakeEngine(t))
		k1 := p.prepare(httptest.NewRequest("POST", "/v1/messages", nil), []byte(turn1)).key
		k2 := p.prepare(httptest.NewRequest("POST", "/v1/messages", nil), []byte(turn2)).key
		return k1, k2
	}
	k1, k2 := keys("served-model")
	if k1.Source != identity.SourceFingerprint || k1 != k2 {
		t.Errorf("mapped: turn keys differ: %+v vs %+v", k1, k2)
	}
	if u1, u2 := keys(""); u1 == u2 { // without mapping the name is part of the fingerprint
		t.Errorf("unmapped: the two names gave one key %+v; the test cannot tell mapping apart", u1)
	}
}

func TestModelsAndHelloAreAnsweredLocally(t *testing.T) {
	e := newFakeEngine(t)
	_, front := testProxy(t, Config{ServedModel: "served-model"}, e)
	resp, err := http.Get(front.URL + "/v1/models?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ids := gjson.GetBytes(b, "data.#.id").String(); ids != `["served-model"]` {
		t.Errorf("/v1/models ids %s: %s", ids, b)
	}
	resp, err = http.Head(front.URL + "/api/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || e.count() != 0 {
		t.Errorf("HEAD /api/hello: %d, engine requests %d", resp.StatusCode, e.count())
	}
}

// BenchmarkPrepareModelMapping measures what mapping the model name adds to
// preparing a ~300 KB Claude Code request: "same" sends the served name
// (nothing to rewrite), "mapped-*" maps Claude Code's own name to a
// shorter (in place) or longer served name.
func BenchmarkPrepareModelMapping(b *testing.B) {
	body := claudeCodeTurn1("s-1", strings.Repeat("static system prompt ", 15000), "task")
	for _, tc := range []struct{ name, model string }{{"same", "claude-opus-5-5"}, {"mapped-shorter", "served-model"}, {"mapped-longer", "Qwen/Qwen3-4B-Instruct-2507"}} {
		b.Run(tc.name, func(b *testing.B) {
			p, _ := testProxy(b, Config{ServedModel: tc.model}, newFakeEngine(b))
			r := httptest.NewRequest("POST", "/v1/messages", nil)
			r.Header.Set("X-Claude-Code-Session-Id", "s-1")
			buf := make([]byte, len(body))
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				copy(buf, body) // prepare edits its buffer in place
				if req := p.prepare(r, buf[:len(body)]); req.refuse != "" {
					b.Fatal(req.refuse)
				}
			}
		})
	}
}
