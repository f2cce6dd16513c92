package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

func TestStreamWithoutIncludeUsageNeverShowsTheUsageChunk(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{}, e)
	resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("s1", true, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if strings.Contains(body, `"usage":{`) || strings.Contains(body, `"choices":[]`) {
		t.Errorf("client that did not ask got the usage chunk:\n%s", body)
	}
	if !strings.Contains(body, `"content":"c"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("stream lost events:\n%s", body)
	}
	if !gjson.Get(e.lastBody(), "stream_options.include_usage").Bool() {
		t.Errorf("engine was not asked for usage: %s", e.lastBody())
	}
	settled(t, p)
	r := coreOf(p).Status().Replicas[0]
	if r.PromptTokens != 100 || r.CachedTokens != 64 || r.CompletionTokens != 3 {
		t.Errorf("usage not collected: prompt %d cached %d completion %d", r.PromptTokens, r.CachedTokens, r.CompletionTokens)
	}
	if got := resp.Header.Get(identity.PinHeader); got != "0" {
		t.Errorf("X-Warden-Replica = %q, want 0", got)
	}
	if got := resp.Header.Get(routeHeader); got != "new" {
		t.Errorf("X-Warden-Route = %q, want new", got)
	}
}

func TestStreamWithIncludeUsageKeepsTheUsageChunk(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{}, e)
	_, body := post(t, front.URL+"/v1/chat/completions", chatBody("s1", true, `,"stream_options":{"include_usage":true}`))
	if !strings.Contains(body, `"choices":[],"usage":{"prompt_tokens":100`) {
		t.Errorf("client that asked lost the usage chunk:\n%s", body)
	}
	settled(t, p)
	if got := coreOf(p).Status().Totals.CachedTokens; got != 64 {
		t.Errorf("cached tokens = %d, want 64", got)
	}
}

func TestNonStreamingAndAnthropicUsage(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{}, e)
	_, body := post(t, front.URL+"/v1/chat/completions", chatBody("s1", false, ""))
	if !strings.Contains(body, `"cached_tokens":64`) {
		t.Errorf("JSON response changed: %s", body)
	}
	post(t, front.URL+"/v1/messages?beta=true", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`,
		"X-Claude-Code-Session-Id", ccID)
	settled(t, p)
	tot := coreOf(p).Status().Totals
	if tot.PromptTokens != 300 || tot.CachedTokens != 224 || tot.CompletionTokens != 10 {
		t.Errorf("totals prompt %d cached %d completion %d, want 300 224 10", tot.PromptTokens, tot.CachedTokens, tot.CompletionTokens)
	}
}

func TestStreamedEventsArriveBeforeTheStreamEnds(t *testing.T) {
	e := newFakeEngine(t)
	// An engine that sends one event, then waits for the test.
	release := make(chan struct{})
	e.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	_, front := testProxy(t, testConfig{}, e)
	resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("s", true, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	close(release) // the engine is still holding the stream open until here
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first event = %q, %v", line, err)
	}
}

func TestClaudeBillingBlockIsRemovedUnlessKept(t *testing.T) {
	body := `{"model":"m","stream":true,"system":[` + billing + `,{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"user","content":"x"}]}`
	for _, keep := range []bool{false, true} {
		e := newFakeEngine(t)
		_, front := testProxy(t, testConfig{Proxy: Config{KeepBillingHeader: keep}}, e)
		post(t, front.URL+"/v1/messages?beta=true", body)
		sys := gjson.Get(e.lastBody(), "system")
		has := strings.Contains(sys.Raw, identity.BillingPrefix)
		if has != keep || !strings.Contains(sys.Raw, "You are Claude Code.") {
			t.Errorf("keep=%v: engine got system %s", keep, sys.Raw)
		}
	}
}

func TestRetryOnAnotherReplicaWhenTheFirstRefusesConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	e := newFakeEngine(t)
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicyOff}}, []router.Backend{{Rank: 0, URL: dead}, {Rank: 1, URL: e.srv.URL}})
	resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("s", false, ""))
	if resp.StatusCode != 200 || resp.Header.Get(identity.PinHeader) != "1" {
		t.Fatalf("status %d replica %q: %s", resp.StatusCode, resp.Header.Get(identity.PinHeader), body)
	}
	if e.count() != 1 || !strings.Contains(e.lastBody(), `"hello"`) {
		t.Errorf("the retry did not replay the body: %q", e.lastBody())
	}
	settled(t, p)
	if st := coreOf(p).Status(); st.Replicas[0].Up || st.Replicas[0].InFlight != 0 || st.Replicas[1].Requests != 1 {
		t.Errorf("after retry: replica 0 up=%v in-flight=%d; replica 1 requests %d",
			st.Replicas[0].Up, st.Replicas[0].InFlight, st.Replicas[1].Requests)
	}
}

func TestBodyOverTheLimitGets413(t *testing.T) {
	e := newFakeEngine(t)
	_, front := testProxy(t, testConfig{Config: router.Config{MaxBodyBytes: 1000}}, e)
	resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("s", false, `,"pad":"`+strings.Repeat("x", 2000)+`"`))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "1000 B (--max-body-bytes)") {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
	if e.count() != 0 {
		t.Error("an over-limit body reached the engine")
	}
}

// A client that writes its whole body before it reads (no Expect:
// 100-continue, as Python's urllib and httpx do) reads the 413 and its
// message instead of a broken pipe.
func TestBodyOverTheLimitWithoutExpectReadsThe413(t *testing.T) {
	e := newFakeEngine(t)
	_, front := testProxy(t, testConfig{Config: router.Config{MaxBodyBytes: 64 << 10}}, e)
	body := `{"model":"m","pad":"` + strings.Repeat("x", 4<<20) + `"}`
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := io.WriteString(conn, head+body); err != nil {
		t.Fatalf("writing the whole body (as urllib does): %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "--max-body-bytes") {
		t.Errorf("status %d body %s", resp.StatusCode, b)
	}
}

func TestMalformedJSONIsForwardedAndTheEngineAnswers(t *testing.T) {
	e := newFakeEngine(t)
	_, front := testProxy(t, testConfig{}, e)
	resp, _ := post(t, front.URL+"/v1/chat/completions", `{"model":"m","messages":[`)
	if resp.StatusCode != http.StatusBadRequest || e.count() != 1 {
		t.Errorf("status %d, engine saw %d requests", resp.StatusCode, e.count())
	}
}

func TestClientDisconnectCancelsTheEngineRequest(t *testing.T) {
	e := newFakeEngine(t)
	e.hold = make(chan struct{})
	p, front := testProxy(t, testConfig{}, e)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(chatBody("s", true, "")))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-e.arrived
	cancel()
	<-e.gone // the engine saw its request cancelled
	<-done
	settled(t, p)
	if st := coreOf(p).Status(); st.Replicas[0].Errors != 0 || st.Replicas[0].Requests != 0 {
		t.Errorf("a client cancel counted as errors=%d requests=%d", st.Replicas[0].Errors, st.Replicas[0].Requests)
	}
}

func TestBurstOfNewConversationsSpreadsEvenly(t *testing.T) {
	const n, replicas = 100, 4
	var es []*fakeEngine
	hold := make(chan struct{})
	for range replicas {
		e := newFakeEngine(t)
		e.hold = hold
		es = append(es, e)
	}
	p, front := testProxy(t, testConfig{}, es...)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, front.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("burst-%d", i), false, ""))
		}()
	}
	simproc.Poll(t, "all requests in flight", func() bool { return coreOf(p).Status().InFlight == n })
	for _, r := range coreOf(p).Status().Replicas {
		if r.InFlight != n/replicas || r.ActiveSessions != n/replicas {
			t.Errorf("replica %d: in flight %d, sessions %d; want %d each", r.Rank, r.InFlight, r.ActiveSessions, n/replicas)
		}
	}
	close(hold)
	wg.Wait()
}

func TestPinHeader(t *testing.T) {
	e0, e1 := newFakeEngine(t), newFakeEngine(t)
	p, front := testProxy(t, testConfig{}, e0, e1)
	resp, _ := post(t, front.URL+"/v1/chat/completions", chatBody("s", false, ""), identity.PinHeader, "1")
	if resp.Header.Get(identity.PinHeader) != "1" || resp.Header.Get(routeHeader) != "pinned" {
		t.Errorf("pinned request went to %s (%s)", resp.Header.Get(identity.PinHeader), resp.Header.Get(routeHeader))
	}
	if h := e1.heads[0].Get(identity.PinHeader); h != "" {
		t.Errorf("pin header forwarded to the engine: %q", h)
	}
	settled(t, p)
	if coreOf(p).Status().Replicas[1].Pinned != 1 {
		t.Error("pinned turn not counted")
	}
	for _, v := range []string{"7", "x"} {
		resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("s", false, ""), identity.PinHeader, v)
		if resp.StatusCode < 400 || !strings.Contains(body, "X-Warden-Replica") {
			t.Errorf("pin %q: status %d body %s", v, resp.StatusCode, body)
		}
	}
}

// TestForwardedHeaders: the engine gets the client's headers except the
// warden's own (pin, API key) and Accept-Encoding (the tap reads plain
// bytes), also on a retry after a replica refused the connection, and the
// client's request is not edited in place between attempts.
func TestForwardedHeaders(t *testing.T) {
	dead, e := newFakeEngine(t), newFakeEngine(t)
	dead.srv.Close() // connection refused: the attempt is retried on e
	_, front := testProxy(t, testConfig{Proxy: Config{APIKey: "k3y"}}, dead, e)
	for i := range 4 { // new sessions go to the least loaded: some try the dead replica first
		resp, body := post(t, front.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("s%d", i), false, ""),
			"Authorization", "Bearer k3y", "Accept-Encoding", "br", "X-Custom", "kept", "session_id", fmt.Sprintf("s%d", i))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.heads) != 4 {
		t.Fatalf("the live engine saw %d requests, want 4", len(e.heads))
	}
	for i, h := range e.heads {
		if h.Get("X-Custom") != "kept" || h.Get("session_id") == "" {
			t.Errorf("request %d: client headers lost: %v", i, h)
		}
		if h.Get("Authorization") != "" || h.Get(identity.PinHeader) != "" || h.Get("Accept-Encoding") == "br" {
			t.Errorf("request %d: the engine got the warden's or an encoding header: %v", i, h)
		}
	}
}

// TestUnknownPathIsNotATurn: a /v1/* path the engine does not serve gets a
// 404 in the API's shape naming the path, and counts no turn.
func TestUnknownPathIsNotATurn(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{}, e)
	resp, body := post(t, front.URL+"/v1/foo", `{"model":"m"}`)
	if resp.StatusCode != 404 || !strings.Contains(gjson.Get(body, "error.message").Str, "does not serve /v1/foo") {
		t.Errorf("POST /v1/foo: %d %s", resp.StatusCode, body)
	}
	settled(t, p)
	if n := coreOf(p).Status().Totals.Requests; n != 0 {
		t.Errorf("%d turns counted for an unknown path, want 0", n)
	}
}

var _ Core = (*router.Core)(nil)
