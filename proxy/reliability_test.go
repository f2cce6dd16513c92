package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// Reliability tests against real simulator processes: engines killed,
// stopped or failing, and clients that go away. The bad-input, load and
// exposure tests are in reliability_input_test.go and load_test.go.

// simSet starts one simulator per argument list (rank = index), in
// parallel, and returns them with their backends.
func simSet(t *testing.T, perSim ...[]string) ([]*simproc.Proc, []router.Backend) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts simulator processes")
	}
	simproc.Binary(t)
	procs := make([]*simproc.Proc, len(perSim))
	var wg sync.WaitGroup
	for i, extra := range perSim {
		args := append([]string{"--enable-prompt-tokens-details", "--max-num-seqs", "32"}, extra...)
		wg.Add(1)
		go func() { defer wg.Done(); procs[i] = simproc.StartNoWait(t, args...) }()
	}
	wg.Wait()
	bs := make([]router.Backend, len(procs))
	for i, p := range procs {
		if err := p.WaitHealthy(30 * time.Second); err != nil {
			t.Fatalf("sim %d: %v\n%s", i, err, p.Output())
		}
		bs[i] = router.Backend{Rank: i, URL: p.URL, MaxNumSeqs: 32}
	}
	return procs, bs
}

// fast and slow are simulator speeds: slow streams for seconds, so a test
// can act while the stream is open.
var (
	fast = []string{"--sim-time-scale", "200"}
	slow = []string{"--sim-time-scale", "1"}
)

func streamBody(session string, maxTokens int) string {
	return fmt.Sprintf(`{"model":"test-model","stream":true,"max_tokens":%d,"prompt_cache_key":%q,`+
		`"messages":[{"role":"user","content":"tell a long story about %s"}]}`, maxTokens, session, session)
}

// openStream posts a streaming chat request and returns the response and a
// reader positioned after the first data event.
func openStream(t *testing.T, ctx context.Context, url, body string, kv ...string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before its first event: %v", err)
		}
		if strings.HasPrefix(line, "data: {") {
			return resp, br
		}
	}
}

func TestEngineKilledMidStreamEndsWithAnErrorEventAndSessionsFailOver(t *testing.T) {
	procs, bs := simSet(t, slow, fast)
	p, front := testProxyBackends(t, testConfig{}, bs)
	// The victim stream is pinned to replica 0, its session lives there.
	resp, rest := openStream(t, context.Background(), front.URL, streamBody("victim", 4000), identity.PinHeader, "0")
	if resp.Header.Get(identity.PinHeader) != "0" {
		t.Fatalf("stream went to replica %s", resp.Header.Get(identity.PinHeader))
	}
	procs[0].Kill() // SIGKILL to the engine's process group, mid-stream
	tail, err := io.ReadAll(rest)
	if err != nil {
		t.Fatalf("the client's stream was cut instead of ended with an error event: %v\n%s", err, tail)
	}
	last := simproc.LastEvent(string(tail))
	msg := gjson.Get(last, "error.message").Str
	t.Logf("stream tail after the kill: %q", tail)
	if !strings.Contains(msg, "replica 0") || strings.Contains(string(tail), "[DONE]") {
		t.Fatalf("stream tail does not end with an error event naming replica 0:\n%s", tail)
	}
	// Other requests keep flowing, and a session whose home was replica 0
	// fails over to replica 1.
	for i := range 20 {
		r, body := post(t, front.URL+"/v1/chat/completions", simChat(fmt.Sprintf("other-%d", i)))
		if r.StatusCode != http.StatusOK || r.Header.Get(identity.PinHeader) != "1" {
			t.Fatalf("request %d after the kill: status %d replica %s: %s", i, r.StatusCode, r.Header.Get(identity.PinHeader), body)
		}
	}
	r, body := post(t, front.URL+"/v1/chat/completions", simChat("victim"))
	if r.StatusCode != http.StatusOK || r.Header.Get(routeHeader) != string(place.ReasonFailover) {
		t.Errorf("the dead replica's session: status %d route %q: %s", r.StatusCode, r.Header.Get(routeHeader), body)
	}
	settled(t, p)
	st := coreOf(p).Status()
	if st.Replicas[0].Up || st.Replicas[0].Errors == 0 || st.Replicas[1].Requests < 21 {
		t.Errorf("after the kill: replica 0 up=%v errors=%d; replica 1 requests %d",
			st.Replicas[0].Up, st.Replicas[0].Errors, st.Replicas[1].Requests)
	}
}

// simChat is a short non-streaming chat turn for the simulator.
func simChat(session string) string {
	return fmt.Sprintf(`{"model":"test-model","max_tokens":4,"prompt_cache_key":%q,"messages":[{"role":"user","content":"hi %s"}]}`,
		session, session)
}

// goroutines is the number of goroutines now.
func goroutines() int { return runtime.NumGoroutine() }

func TestEngineDiesBeforeHeadersGets502NamingTheReplica(t *testing.T) {
	_, bs := simSet(t, append([]string{"--sim-die-after", "1"}, fast...))
	p, front := testProxyBackends(t, testConfig{}, bs)
	resp, body := post(t, front.URL+"/v1/chat/completions", simChat("s"))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(gjson.Get(body, "error.message").Str, "replica 0") {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
	settled(t, p)
}

func TestEngineAnswering500sIsNamedThenTakenOutAndBackWhenHealthy(t *testing.T) {
	_, bs := simSet(t, append([]string{"--sim-http-error", "500"}, fast...), fast)
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Clock: clock.now, FailCooldown: time.Minute}}, bs)
	for i := range engine.ReqFailsDown {
		resp, body := post(t, front.URL+"/v1/chat/completions", simChat("s"), identity.PinHeader, "0")
		msg := gjson.Get(body, "error.message").Str
		if resp.StatusCode != http.StatusInternalServerError || !strings.HasPrefix(msg, "replica 0: simulated failure") {
			t.Fatalf("failure %d: status %d, body %s", i, resp.StatusCode, body)
		}
	}
	settled(t, p)
	if st := coreOf(p).Status(); st.Replicas[0].Up || st.Replicas[0].Errors != engine.ReqFailsDown {
		t.Fatalf("after %d failures: replica 0 up=%v errors=%d", engine.ReqFailsDown, st.Replicas[0].Up, st.Replicas[0].Errors)
	}
	for i := range 10 {
		resp, _ := post(t, front.URL+"/v1/chat/completions", simChat(fmt.Sprintf("n%d", i)))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(identity.PinHeader) != "1" {
			t.Fatalf("request %d while replica 0 is out: status %d replica %s", i, resp.StatusCode, resp.Header.Get(identity.PinHeader))
		}
	}
	coreOf(p).CheckNow(context.Background()) // healthy, but still within the cooldown
	if coreOf(p).Status().Replicas[0].Up {
		t.Fatal("back in rotation before the cooldown ended")
	}
	clock.add(time.Minute)
	coreOf(p).CheckNow(context.Background())
	if !coreOf(p).Status().Replicas[0].Up {
		t.Fatal("not back in rotation after the cooldown and a good health check")
	}
}

func TestHungEngineTimesOutNamedAndIsBackAfterItRecovers(t *testing.T) {
	procs, bs := simSet(t, fast, fast)
	p, front := testProxyBackends(t, testConfig{Config: router.Config{FailCooldown: time.Millisecond, ScrapeInterval: 50 * time.Millisecond}, Proxy: Config{ResponseHeaderTimeout: 300 * time.Millisecond}}, bs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go coreOf(p).Run(ctx)
	pid := procs[0].Cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil { // a real hang: the process is frozen
		t.Fatal(err)
	}
	defer syscall.Kill(-pid, syscall.SIGCONT)
	for range engine.ReqFailsDown {
		resp, body := post(t, front.URL+"/v1/chat/completions", simChat("s"), identity.PinHeader, "0")
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, "replica 0: no response headers within 300ms") {
			t.Fatalf("hung engine: status %d: %s", resp.StatusCode, body)
		}
	}
	simproc.Poll(t, "the hung replica out of rotation", func() bool { return !coreOf(p).Status().Replicas[0].Up })
	for i := range 5 {
		resp, _ := post(t, front.URL+"/v1/chat/completions", simChat(fmt.Sprintf("n%d", i)))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(identity.PinHeader) != "1" {
			t.Fatalf("request %d while replica 0 hangs: status %d replica %s", i, resp.StatusCode, resp.Header.Get(identity.PinHeader))
		}
	}
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	simproc.Poll(t, "the recovered replica back in rotation", func() bool { return coreOf(p).Status().Replicas[0].Up })
	resp, body := post(t, front.URL+"/v1/chat/completions", simChat("s"), identity.PinHeader, "0")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after recovery: status %d: %s", resp.StatusCode, body)
	}
}

func TestClientDisconnectMidStreamCancelsTheEngineWork(t *testing.T) {
	procs, bs := simSet(t, slow)
	p, front := testProxyBackends(t, testConfig{}, bs)
	before := goroutines()
	ctx, cancel := context.WithCancel(context.Background())
	openStream(t, ctx, front.URL, streamBody("leaver", 4000))
	if running := procs[0].Metrics(t)["vllm:num_requests_running"]; running != 1 {
		t.Fatalf("engine running %v during the stream, want 1", running)
	}
	cancel() // the client goes away mid-stream
	simproc.Poll(t, "the engine's running count to drop", func() bool {
		return procs[0].Metrics(t)["vllm:num_requests_running"] == 0
	})
	settled(t, p)
	http.DefaultClient.CloseIdleConnections()
	simproc.Poll(t, "goroutines to settle", func() bool { return goroutines() <= before })
	if st := coreOf(p).Status(); st.Replicas[0].Errors != 0 || !st.Replicas[0].Up {
		t.Errorf("a client cancel counted against the replica: errors %d up %v", st.Replicas[0].Errors, st.Replicas[0].Up)
	}
}

func TestTheLastReplicaInRotationStaysDespiteFailures(t *testing.T) {
	_, bs := simSet(t, append([]string{"--sim-http-error", "500"}, fast...))
	p, front := testProxyBackends(t, testConfig{}, bs)
	for i := range 2 * engine.ReqFailsDown {
		resp, body := post(t, front.URL+"/v1/chat/completions", simChat("s"))
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "replica 0: ") {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	settled(t, p)
	if r := coreOf(p).Status().Replicas[0]; !r.Up || r.Errors != 2*engine.ReqFailsDown {
		t.Errorf("the only replica: up %v, errors %d", r.Up, r.Errors)
	}
}

// TestStalledStreamEndsWithinTheIdleTimeout: an engine stopped (SIGSTOP)
// after its first tokens leaves its stream silent; within the idle timeout
// the client's stream ends with the error event of a broken stream naming
// the replica, the replica leaves the rotation, and the next request is
// served by the other one.
func TestStalledStreamEndsWithinTheIdleTimeout(t *testing.T) {
	procs, bs := simSet(t, slow, fast)
	const idle = 500 * time.Millisecond
	_, front := testProxyBackends(t, testConfig{Proxy: Config{StreamIdleTimeout: idle}}, bs)
	resp, rest := openStream(t, context.Background(), front.URL, streamBody("stalled", 4000), identity.PinHeader, "0")
	if resp.Header.Get(identity.PinHeader) != "0" {
		t.Fatalf("stream went to replica %s", resp.Header.Get(identity.PinHeader))
	}
	if err := procs[0].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer procs[0].Signal(syscall.SIGCONT)
	stopped := time.Now()
	tail, err := io.ReadAll(rest)
	waited := time.Since(stopped)
	if err != nil {
		t.Fatalf("the stream was cut instead of ended with an error event: %v\n%s", err, tail)
	}
	msg := gjson.Get(simproc.LastEvent(string(tail)), "error.message").Str
	if !strings.Contains(msg, "replica 0") || !strings.Contains(msg, "--stream-idle-timeout") || strings.Contains(string(tail), "[DONE]") {
		t.Fatalf("the stalled stream does not end with an error event naming replica 0 and the timeout:\n%s", tail)
	}
	t.Logf("stream ended %v after SIGSTOP (idle timeout %v)", waited.Round(time.Millisecond), idle)
	r, body := post(t, front.URL+"/v1/chat/completions", simChat("after-the-stall"))
	if r.StatusCode != http.StatusOK || r.Header.Get(identity.PinHeader) != "1" {
		t.Fatalf("the request after the stall: status %d on replica %s: %s", r.StatusCode, r.Header.Get(identity.PinHeader), body)
	}
}
