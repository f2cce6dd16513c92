package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
)

// TestReplaysAreBounded: a request that takes every engine down before
// its first answer byte (a poison request: each engine resets the
// connection) is replayed once, not on every replica in turn; the client
// gets the 502, and the replay is counted.
func TestReplaysAreBounded(t *testing.T) {
	var seen atomic.Int32
	var bs []router.Backend
	for i := range 4 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/chat/completions" {
				return
			}
			io.Copy(io.Discard, r.Body)
			seen.Add(1)
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.(*net.TCPConn).SetLinger(0) // RST: the engine died on it
			conn.Close()
		}))
		t.Cleanup(srv.Close)
		bs = append(bs, router.Backend{Rank: i, URL: srv.URL, MaxNumSeqs: 32})
	}
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicySticky}}, bs)
	resp, out := post(t, front.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"poison"}]}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(out, "replayed") {
		t.Errorf("status %d %s; want 502 saying the request was replayed", resp.StatusCode, out)
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("the engines saw the request %d times, want 2 (once, then one replay)", n)
	}
	settled(t, p)
	if n, _ := metric(t, p.core.Registry(), "warden_retries_total", "reason", "reset"); n != 1 {
		t.Errorf("warden_retries_total{reason=reset} = %v, want the 1 replay", n)
	}
	if n, _ := metric(t, p.core.Registry(), "warden_replays_refused_total"); n != 1 {
		t.Errorf("warden_replays_refused_total = %v, want 1 (the second replay, refused)", n)
	}
}
