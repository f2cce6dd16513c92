package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
)

// resettingEngine answers its first request and resets the kept-alive
// connection on the second, as an engine that was SIGKILLed between two
// requests does.
func resettingEngine(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
			conn.Close()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestResetOnAKeptAliveConnectionGoesToAnotherReplica(t *testing.T) {
	a, na := resettingEngine(t)
	b, nb := resettingEngine(t)
	_, front := testProxyBackends(t, Config{Policy: PolicySticky},
		[]Backend{{Rank: 0, URL: a.URL, MaxNumSeqs: 32}, {Rank: 1, URL: b.URL, MaxNumSeqs: 32}})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, _ := post(t, front.URL+"/v1/chat/completions", body, "X-Claude-Code-Session-Id", "s1")
	home, _ := strconv.Atoi(resp.Header.Get(PinHeader))
	if resp.StatusCode != 200 {
		t.Fatalf("first turn: %d", resp.StatusCode)
	}
	resp, out := post(t, front.URL+"/v1/chat/completions", body, "X-Claude-Code-Session-Id", "s1")
	if resp.StatusCode != 200 {
		t.Fatalf("second turn, home %d reset the connection: %d %s", home, resp.StatusCode, out)
	}
	if got, _ := strconv.Atoi(resp.Header.Get(PinHeader)); got == home {
		t.Errorf("second turn answered by replica %d, the one that reset", got)
	}
	if na.Load()+nb.Load() != 3 {
		t.Errorf("engines saw %d + %d requests, want 3 (one reset, then one retry elsewhere)", na.Load(), nb.Load())
	}
}
