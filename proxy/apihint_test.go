package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// A client whose base URL lacks /v1 gets a 404 that names the right path,
// in its API's shape, and nothing reaches an engine; other unknown paths
// keep the plain 404 (issue 45).
func TestAPIPathWithoutV1NamesTheRightPath(t *testing.T) {
	e := newFakeEngine(t)
	_, front := testProxy(t, testConfig{}, e)
	for _, tc := range []struct{ path, want, msgAt string }{
		{"/chat/completions", "use /v1/chat/completions", "error.message"},
		{"/messages", "use /v1/messages", "error.message"},
		{"/completions", "use /v1/completions", "error.message"},
	} {
		resp, body := post(t, front.URL+tc.path, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		if msg := gjson.Get(body, tc.msgAt).String(); resp.StatusCode != http.StatusNotFound || !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s: %s %s, want 404 with %q", tc.path, resp.Status, body, tc.want)
		}
	}
	if n := e.count(); n != 0 {
		t.Errorf("%d requests reached the engine", n)
	}
	resp, body := post(t, front.URL+"/no/such/thing", `{}`)
	if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "/v1") {
		t.Errorf("POST /no/such/thing: %s %s, want the plain 404", resp.Status, body)
	}
	if resp, err := http.Get(front.URL + "/models"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /models: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
