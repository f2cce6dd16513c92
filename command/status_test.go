package command

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/schema"
)

func TestStatusCommandBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--url", "ftp://x"}, {"status", "--url", ""}, {"status", "--watch", "soon"},
		{"status", "--watch", "1ms"}, {"status", "--watch", "1s", "2s"},
	} {
		if _, _, err := runWarden(t, args...); exitCode(err) != 2 {
			t.Errorf("%q: got %v, want exit code 2", args, err)
		}
	}
}

// TestStatusURLFromTheEnvironment: WARDEN_URL is --url, host:port too.
func TestStatusURLFromTheEnvironment(t *testing.T) {
	s := schema.Status{Model: "m", Policy: "adaptive", Replicas: []schema.Replica{{Rank: 0, URL: "http://127.0.0.1:1", Up: true}}}
	srv := httptest.NewServer(panel.JSONHandler(func() schema.Status { return s }))
	defer srv.Close()
	t.Setenv("WARDEN_URL", strings.TrimPrefix(srv.URL, "http://"))
	out, _, err := runWarden(t, "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got schema.Status
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestStatusTakesTheAgentsBaseURL: --url as agents take it (ending in /v1)
// names the same warden.
func TestStatusTakesTheAgentsBaseURL(t *testing.T) {
	s := schema.Status{Model: "m", Policy: "adaptive", Replicas: []schema.Replica{{Rank: 0, URL: "http://127.0.0.1:1", Up: true}}}
	mux := http.NewServeMux()
	mux.Handle("GET /warden/status", panel.JSONHandler(func() schema.Status { return s }))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	out, _, err := runWarden(t, "status", "--json", "--url", srv.URL+"/v1")
	if err != nil {
		t.Fatalf("warden status --url %s/v1: %v", srv.URL, err)
	}
	var got schema.Status
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Model != "m" {
		t.Errorf("--json output: %v\n%s", err, out)
	}
}
