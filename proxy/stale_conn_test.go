package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// resettingEngine answers its requests but resets the connection on the
// resetOn-th, after reading it and before any answer byte, as an engine
// SIGKILLed between two requests (a kept-alive connection) or while it
// took one (a new connection) does.
func resettingEngine(t *testing.T, resetOn int32) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if n.Add(1) == resetOn {
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
	a, na := resettingEngine(t, 2)
	b, nb := resettingEngine(t, 2)
	_, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicySticky}},
		[]router.Backend{{Rank: 0, URL: a.URL, MaxNumSeqs: 32}, {Rank: 1, URL: b.URL, MaxNumSeqs: 32}})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, _ := post(t, front.URL+"/v1/chat/completions", body, "X-Claude-Code-Session-Id", "s1")
	home, _ := strconv.Atoi(resp.Header.Get(identity.PinHeader))
	if resp.StatusCode != 200 {
		t.Fatalf("first turn: %d", resp.StatusCode)
	}
	resp, out := post(t, front.URL+"/v1/chat/completions", body, "X-Claude-Code-Session-Id", "s1")
	if resp.StatusCode != 200 {
		t.Fatalf("second turn, home %d reset the connection: %d %s", home, resp.StatusCode, out)
	}
	if got, _ := strconv.Atoi(resp.Header.Get(identity.PinHeader)); got == home {
		t.Errorf("second turn answered by replica %d, the one that reset", got)
	}
	if na.Load()+nb.Load() != 3 {
		t.Errorf("engines saw %d + %d requests, want 3 (one reset, then one retry elsewhere)", na.Load(), nb.Load())
	}
}

// TestResetBeforeAnyAnswerByteGoesToAnotherReplica: an engine that takes
// a request on a new connection and resets it before answering (killed
// while it held the request: the race TestServeEngineKilledMidStream... and
// the crash-loop test met as a 502) has served nothing, so the request is
// replayed on the other replica, answered 200 there, and the retry counted.
func TestResetBeforeAnyAnswerByteGoesToAnotherReplica(t *testing.T) {
	var seen atomic.Int32 // over both engines: the first request is reset
	engine := func() *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if seen.Add(1) == 1 {
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
				conn.Close()
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := engine(), engine()
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicySticky}},
		[]router.Backend{{Rank: 0, URL: a.URL, MaxNumSeqs: 32}, {Rank: 1, URL: b.URL, MaxNumSeqs: 32}})
	resp, out := post(t, front.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("a reset before any answer byte reached the client: %d %s", resp.StatusCode, out)
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("the engines saw %d requests, want 2 (the reset, then the replay)", n)
	}
	if n, _ := metric(t, coreOf(p).Registry(), "warden_retries_total", "reason", "reset"); n != 1 {
		t.Errorf("warden_retries_total{reason=reset} = %v, want 1", n)
	}
}

// TestClosedBeforeAnswer: the errors a reset kept-alive connection shows
// retry elsewhere, including the body write's "use of closed network
// connection" (the transport's reader saw the RST first; the stale-
// connection test above failed about 1 run in 60 on it); a cancelled
// client or a timeout does not.
func TestClosedBeforeAnswer(t *testing.T) {
	write := func(err error) error {
		return &net.OpError{Op: "readfrom", Net: "tcp", Err: &net.OpError{Op: "write", Net: "tcp", Err: err}}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{write(net.ErrClosed), true},
		{write(syscall.ECONNRESET), true},
		{write(syscall.EPIPE), true},
		{io.ErrUnexpectedEOF, true},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("http: server gave HTTP response to HTTPS client"), false},
	} {
		if got := closedBeforeAnswer(tc.err); got != tc.want {
			t.Errorf("closedBeforeAnswer(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
