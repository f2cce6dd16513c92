package router

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lmwarden/warden/router/place"
)

// syncBuffer is a log destination safe for the core's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A box whose /v1/models wants a key (vLLM --api-key) is said once, not
// passed over in silence (issue 45).
func TestModelsDeniedIsSaidOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			http.Error(w, `{"error":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	var logs syncBuffer
	c := testCoreBackends(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		[]Backend{{Rank: 0, URL: srv.URL, MaxNumSeqs: 32}})
	r := c.Replicas()[0]
	for range 3 {
		c.learnMaxModelLen(context.Background(), r)
	}
	if n := strings.Count(logs.String(), "refuses GET /v1/models without a key"); n != 1 {
		t.Errorf("said %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "401 Unauthorized") {
		t.Errorf("the warning does not name the answer:\n%s", logs.String())
	}
}

// A box's warden behind route or epp is read whole, and the log calls it a
// warden, not "the engine" (issue 45).
func TestScrapeNamesAWardenAsAWarden(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("# TYPE warden_engine_requests_running gauge\nwarden_engine_requests_running{replica=\"0\"} 2\n"))
	}))
	defer srv.Close()
	var logs syncBuffer
	c := testCoreBackends(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		[]Backend{{Rank: 0, URL: srv.URL, MaxNumSeqs: 32}})
	if _, err := c.scrape(context.Background(), c.Replicas()[0]); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "the server is a warden") || strings.Contains(out, "the engine does not answer") {
		t.Errorf("log:\n%s", out)
	}
}

// When the gateway served a request elsewhere, the log names the box that
// did not answer before the one that served (issue 45: only the endpoint
// that served was named).
func TestServedElsewhereNamesTheBoxThatDied(t *testing.T) {
	var logs syncBuffer
	c := testCoreBackends(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, []Backend{
		{Rank: 0, URL: "http://10.0.0.5:8000", MaxNumSeqs: 32}, {Rank: 1, URL: "http://10.0.0.6:8000", MaxNumSeqs: 32}})
	req := place.Request{Key: "s", Skip: []int{1}}
	pl := c.Place(context.Background(), req)
	if pl.Rank != 0 {
		t.Fatalf("placed on %d, want 0", pl.Rank)
	}
	served := c.Finish(&pl, Outcome{Retry: ServedElsewhere, ServedOn: "10.0.0.6:8000", Request: place.Request{Key: "s"}})
	if served.Rank != 1 {
		t.Errorf("re-placed on %d, want the box that served (1)", served.Rank)
	}
	if want := "10.0.0.5:8000 did not answer; the gateway served the request on 10.0.0.6:8000"; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
}
