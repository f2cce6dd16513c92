package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/router"
)

// TestSlowReaderIsNotTheEnginesFault: a client that stops reading its
// stream for longer than --stream-idle-timeout (the engine's bytes back up
// behind it) leaves the engine in the rotation with no error: the timeout
// measures the engine's silence, not the client's.
func TestSlowReaderIsNotTheEnginesFault(t *testing.T) {
	chunk := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 64<<10) + "\"}}]}\n\n"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range 512 { // 32 MiB: far more than the sockets between hold
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":512}}\n\ndata: [DONE]\n\n")
	})
	a, b := httptest.NewServer(h), httptest.NewServer(h)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	const idle = 100 * time.Millisecond
	p, front := testProxyBackends(t, testConfig{Proxy: Config{StreamIdleTimeout: idle}}, []router.Backend{{Rank: 0, URL: a.URL, MaxNumSeqs: 32},
		{Rank: 1, URL: b.URL, MaxNumSeqs: 32}})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, front.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1024)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * idle) // the client reads nothing: the proxy's writes to it block
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the stream after the pause: %v, ends %q; want it whole", err, tail(string(rest)))
	}
	settled(t, p)
	for _, r := range p.core.Status().Replicas {
		if !r.Up || r.Errors != 0 {
			t.Errorf("replica %d: up %v, %d errors; want up with none (the client paused, the engine did not)", r.Rank, r.Up, r.Errors)
		}
	}
}

func tail(s string) string { return fmt.Sprintf("%.80s", s[max(0, len(s)-80):]) }
