package router_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router"
)

// TestToldToRetryInTheShapeOfTheAPI: with every slot taken, a request that
// waits past --queue-max-wait never reaches the engine and is told to
// retry: 429 with Retry-After on OpenAI's paths, 529 overloaded_error on
// Anthropic's.
func TestToldToRetryInTheShapeOfTheAPI(t *testing.T) {
	e := newFakeEngine(t)
	e.hold = make(chan struct{})
	cfg := testConfig{Config: router.Config{FairShare: true, QueueMaxWait: 20 * time.Millisecond}}
	_, front := testProxyBackends(t, cfg, []router.Backend{{Rank: 0, URL: e.srv.URL, MaxNumSeqs: 1}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := httpRequest(context.Background(), front.URL+"/v1/chat/completions", bigChat("a", 100))
		if resp, err := front.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-e.arrived // the one slot is taken
	for _, tc := range []struct {
		path, body, errType string
		code                int
	}{
		{"/v1/chat/completions", bigChat("b", 100), "error.type", http.StatusTooManyRequests},
		{"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "error.type", 529},
	} {
		req, _ := httpRequest(context.Background(), front.URL+tc.path, tc.body)
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %s, Retry-After %q; want %d with Retry-After", tc.path, resp.Status, resp.Header.Get("Retry-After"), tc.code)
		}
		if tc.code == 529 && gjson.GetBytes(b, "error.type").Str != "overloaded_error" {
			t.Errorf("%s: body %s, want Anthropic's overloaded_error", tc.path, b)
		}
		if !strings.Contains(string(b), "retry") {
			t.Errorf("%s: body %s does not say to retry", tc.path, b)
		}
	}
	close(e.hold)
	<-done
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) != 1 {
		t.Errorf("the engine got %d requests, want only the first", len(e.bodies))
	}
}
