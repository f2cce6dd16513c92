package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router"
)

// TestAddReplicaCheckAndErrorsInOnePlace: a data plane's check refuses a
// replica before it is added (400 with its reason, in the warden's error
// shape); an unknown replica's removal is 404, a bad body 400.
func TestAddReplicaCheckAndErrorsInOnePlace(t *testing.T) {
	core, err := router.New(router.Config{Logger: slog.New(slog.DiscardHandler)},
		[]router.Backend{{Rank: 0, URL: "http://127.0.0.1:9", MaxNumSeqs: 8}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(core, "").CheckReplicas(func(b router.Backend) error {
		if strings.Contains(b.URL, "localhost") {
			return errors.New("name endpoints by IP address")
		}
		return nil
	}).Register(mux)
	do := func(method, body string) (int, string) {
		req := httptest.NewRequest(method, "/warden/replicas", strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:5000"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	for _, tc := range []struct {
		method, body string
		code         int
		msg          string
	}{
		{"POST", `{"url":"http://localhost:8000"}`, 400, "by IP address"},
		{"POST", `{"url":`, 400, "want a JSON body"},
		{"DELETE", `{"url":"http://127.0.0.1:1"}`, 404, "no such replica"},
		{"POST", `{"url":"http://127.0.0.1:8001"}`, 201, ""},
	} {
		code, body := do(tc.method, tc.body)
		if code != tc.code || !strings.Contains(gjson.Get(body, "error.message").Str, tc.msg) {
			t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.body, code, body, tc.code, tc.msg)
		}
	}
	if n := len(core.Replicas()); n != 2 {
		t.Errorf("%d replicas after one good add, want 2", n)
	}
}
