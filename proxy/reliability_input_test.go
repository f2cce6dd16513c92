package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// badInput is one hostile or broken request and what the warden must
// answer.
type badInput struct {
	name        string
	method      string
	path        string
	body        string
	header      map[string]string
	wantStatus  int
	wantMessage string // substring of the answer
}

func badInputs() []badInput {
	chat := "/v1/chat/completions"
	json := map[string]string{"Content-Type": "application/json"}
	long := strings.Repeat("s", 200_000) // a 200 KB session id
	return []badInput{
		{"not JSON", "POST", chat, "hello there", json, 400, "invalid JSON"},
		{"malformed JSON", "POST", chat, `{"model":"test-model","messages":[`, json, 400, "invalid JSON"},
		{"JSON array", "POST", chat, `[1,2,3]`, json, 400, ""},
		{"empty body", "POST", chat, "", json, 400, ""},
		{"deeply nested JSON", "POST", chat, strings.Repeat("[", 100_000), json, 400, "invalid JSON"},
		{"NUL bytes", "POST", chat, "{\x00\x00}", json, 400, "invalid JSON"},
		{"wrong content type", "POST", chat, simChat("ct"), map[string]string{"Content-Type": "text/plain"}, 415, "application/json"},
		{"form content type", "POST", "/v1/messages", `{}`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"},
		{"body over the limit", "POST", chat, `{"model":"test-model","pad":"` + strings.Repeat("x", 300_000) + `"}`, json, 413, "limit"},
		{"huge header", "POST", chat, simChat("h"), map[string]string{"Content-Type": "application/json", "X-Junk": strings.Repeat("j", 2<<20)}, 431, ""},
		{"invalid UTF-8 in the prompt", "POST", chat, "{\"model\":\"test-model\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe\xfdb\"}]}", json, 200, ""},
		{"invalid UTF-8 session id", "POST", chat, simChat("u"), map[string]string{"Content-Type": "application/json", "X-Claude-Code-Session-Id": "id-\xff\xfe"}, 200, ""},
		{"absurdly long session id header", "POST", chat, simChat("l"), map[string]string{"Content-Type": "application/json", "X-Session-Id": long}, 200, ""},
		{"absurdly long session id body", "POST", chat, `{"model":"test-model","max_tokens":2,"prompt_cache_key":"` + long + `","messages":[{"role":"user","content":"x"}]}`, json, 200, ""},
		{"unknown model", "POST", chat, `{"model":"nope","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`, json, 404, "does not exist"},
		{"unknown /v1 path", "POST", "/v1/nothing/here", `{}`, json, 404, ""},
		{"unknown path", "GET", "/nothing/here", "", nil, 404, ""},
		{"bad pin", "POST", chat, simChat("p"), map[string]string{"Content-Type": "application/json", identity.PinHeader: "99"}, 503, "X-Warden-Replica"},
		{"non-numeric pin", "POST", chat, simChat("p"), map[string]string{"Content-Type": "application/json", identity.PinHeader: "one"}, 400, "X-Warden-Replica"},
		{"admin without a JSON body", "POST", "/warden/policy", "sticky", nil, 400, "policy"},
		{"admin unknown policy", "POST", "/warden/policy", `{"policy":"nope"}`, nil, 400, "nope"},
	}
}

func TestBadInputGetsAClearAnswerAndNothingLeaks(t *testing.T) {
	_, bs := simSet(t, fast, fast)
	logs := &simproc.SyncBuffer{}
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), MaxBodyBytes: 256 << 10}}, bs)
	client := &http.Client{}
	defer client.CloseIdleConnections()
	before := goroutines()
	for _, in := range badInputs() {
		req, err := http.NewRequest(in.method, front.URL+in.path, strings.NewReader(in.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range in.header {
			req.Header[k] = []string{v} // as written, invalid bytes included
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s: %v", in.name, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != in.wantStatus || !strings.Contains(string(b), in.wantMessage) {
			t.Errorf("%s: status %d, want %d with %q: %.300s", in.name, resp.StatusCode, in.wantStatus, in.wantMessage, b)
		}
		if resp.StatusCode >= 400 && len(bytes.TrimSpace(b)) == 0 {
			t.Errorf("%s: status %d without a message", in.name, resp.StatusCode)
		}
		t.Logf("%-32s -> %d %.120s", in.name, resp.StatusCode, bytes.TrimSpace(b))
	}
	settled(t, p)
	// Still serving, nothing in flight, no key kept longer than the cap.
	if resp, body := post(t, front.URL+"/v1/chat/completions", simChat("after")); resp.StatusCode != 200 {
		t.Fatalf("after the bad input: status %d: %s", resp.StatusCode, body)
	}
	coreOf(p).Placer().Sessions(func(tab *place.Table) {
		for s := range tab.Oldest() {
			if len(s.Key()) > identity.MaxKeyLen {
				t.Errorf("a session key of %d bytes is kept", len(s.Key()))
			}
		}
	})
	client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	simproc.Poll(t, "goroutines to settle", func() bool { return goroutines() <= before+2 })
	if strings.Contains(logs.String(), strings.Repeat("s", 1000)) {
		t.Error("a 200 KB session id reached the log")
	}
}

func TestAPIKeyIsEnforcedAndNotForwarded(t *testing.T) {
	e := newFakeEngine(t)
	logs := &simproc.SyncBuffer{}
	p, front := testProxy(t, testConfig{Config: router.Config{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, Proxy: Config{APIKey: "k3y-s3cret", AdminToken: "adm1n-t0ken"}}, e)
	for _, c := range []struct {
		name, header, value string
		want                int
	}{
		{"none", "", "", 401},
		{"wrong bearer", "Authorization", "Bearer nope", 401},
		{"wrong x-api-key", "X-Api-Key", "nope", 401},
		{"not bearer", "Authorization", "k3y-s3cret", 401},
		{"bearer", "Authorization", "Bearer k3y-s3cret", 200},
		{"x-api-key", "X-Api-Key", "k3y-s3cret", 200},
	} {
		var kv []string
		if c.header != "" {
			kv = []string{c.header, c.value}
		}
		resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("s", false, ""), kv...)
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, resp.StatusCode, c.want, body)
		}
		if c.want == 401 && (!strings.Contains(gjson.Get(body, "error.message").Str, "API key") || strings.Contains(body, "k3y")) {
			t.Errorf("%s: 401 body %s", c.name, body)
		}
	}
	if e.count() != 2 {
		t.Fatalf("engine saw %d requests, want the 2 with the key", e.count())
	}
	for _, h := range e.heads {
		if h.Get("Authorization") != "" || h.Get("X-Api-Key") != "" {
			t.Errorf("the warden's key was forwarded to the engine: %v", h)
		}
	}
	resp, err := http.Get(front.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health must not need the key: %v %v", resp, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPost, front.URL+"/warden/policy", strings.NewReader(`{"policy":"sticky"}`))
	req.Header.Set("Authorization", "Bearer adm1n-t0ken")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	settled(t, p)
	if out := logs.String(); out == "" || strings.Contains(out, "k3y-s3cret") || strings.Contains(out, "adm1n-t0ken") {
		t.Errorf("debug log (%d bytes) is empty or shows a key:\n%s", len(out), out)
	}
}
