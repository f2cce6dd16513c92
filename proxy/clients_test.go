package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
)

// Names Claude Code sends for its main loop and its small background model
// (titles, summaries).
const (
	claudeMain  = "claude-sonnet-4-6"
	claudeSmall = "claude-haiku-4-5-20251001"
)

func TestMappingKeepsSessionIdentityAcrossNames(t *testing.T) {
	turn1 := `{"model":"` + claudeMain + `","system":"sys","messages":[{"role":"user","content":"task"}]}`
	turn2 := `{"model":"` + claudeSmall + `","system":"sys","messages":[{"role":"user","content":"task"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}`
	keys := func(served string) (identity.SessionKey, identity.SessionKey) {
		p, _ := testProxy(t, testConfig{Config: router.Config{ServedModel: served}}, newFakeEngine(t))
		k1 := mustPrepare(t, p, httptest.NewRequest("POST", "/v1/messages", nil), []byte(turn1)).key
		k2 := mustPrepare(t, p, httptest.NewRequest("POST", "/v1/messages", nil), []byte(turn2)).key
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
	_, front := testProxy(t, testConfig{Config: router.Config{ServedModel: "served-model"}}, e)
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
			p, _ := testProxy(b, testConfig{Config: router.Config{ServedModel: tc.model}}, newFakeEngine(b))
			r := httptest.NewRequest("POST", "/v1/messages", nil)
			r.Header.Set("X-Claude-Code-Session-Id", "s-1")
			buf := make([]byte, len(body))
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				copy(buf, body) // prepare edits its buffer in place
				if req := mustPrepare(b, p, r, buf[:len(body)]); req.refuse != "" {
					b.Fatal(req.refuse)
				}
			}
		})
	}
}
