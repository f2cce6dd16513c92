package realenvoy_test

// The picker behind real Envoy driven the way clients and gateways really
// behave: clients that give up before the first byte, trailers, answers
// with headers only, large and empty bodies, GET /v1/models, and a hundred
// streams at once; each in both body modes (full-duplex, and buffered for
// --fail-open). The engines here are fakes the test controls (their
// /health and /metrics as vLLM's, and completions that hang, fail or echo).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
)

// fakeEngine is an engine whose completions the test decides: a session
// whose id starts with "hang" hangs until its client is gone, "midway"
// sends its first event and then waits for its client to go, "fail"
// answers 500 with no body, anything else streams a short SSE answer
// with usage. It records each completion body it got.
type fakeEngine struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

// arrived is closed when a hanging request of session reaches an engine
// (any of them: the map is shared).
var arrivals sync.Map // session -> chan struct{}

func arrived(session string) chan struct{} {
	ch, _ := arrivals.LoadOrStore(session, make(chan struct{}))
	return ch.(chan struct{})
}

func newFakeEngine(t *testing.T) *fakeEngine {
	e := &fakeEngine{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n")
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"test-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.bodies = append(e.bodies, b)
		e.mu.Unlock()
		session := r.Header.Get("x-session-affinity")
		switch {
		case strings.HasPrefix(session, "hang"):
			close(arrived(session))
			<-r.Context().Done()
		case strings.HasPrefix(session, "midway"):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"o\"}}]}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case strings.HasPrefix(session, "fail"):
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n")
			io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
		}
	})
	e.Server = httptest.NewServer(mux)
	t.Cleanup(e.Close)
	return e
}

func (e *fakeEngine) got() [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][]byte(nil), e.bodies...)
}

// newFakeFarm is the picker over n fake engines behind Envoy.
func newFakeFarm(t *testing.T, n int, eppFlags []string, configFlags ...string) (*farm, []*fakeEngine) {
	t.Helper()
	needEnvoy(t)
	f := &farm{eppFlags: eppFlags}
	var engines []*fakeEngine
	var replicas []string
	for range n {
		e := newFakeEngine(t)
		engines = append(engines, e)
		replicas = append(replicas, "--replica", e.URL)
	}
	f.startEPP(t, replicas)
	f.startEnvoy(t, replicas, configFlags)
	return f, engines
}

// modes are the bootstrap's two body modes.
var modes = []struct {
	name  string
	flags []string
}{{"full-duplex", nil}, {"buffered (fail-open)", []string{"--fail-open"}}}

// chat is a streamed chat turn that asks for its usage itself (the picker
// would add the ask, as serve does, and the body would not be the one sent).
func chat(session string) string {
	return fmt.Sprintf(`{"model":"test-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello from %s"}]}`, session)
}

// settled waits until nothing is in flight and returns the status.
func (f *farm) settled(t *testing.T) gjson.Result {
	t.Helper()
	simproc.Poll(t, "nothing in flight", func() bool { return f.status(t).Get("in_flight").Int() == 0 })
	return f.status(t)
}

// noEngineBlamed fails when an engine is out of rotation or has errors.
func noEngineBlamed(t *testing.T, st gjson.Result) {
	t.Helper()
	for _, r := range st.Get("replicas").Array() {
		if !r.Get("up").Bool() || r.Get("errors").Int() != 0 {
			t.Errorf("replica %d: up %v, %d errors; want up with none (clients gave up, the engine did not fail)",
				r.Get("rank").Int(), r.Get("up").Bool(), r.Get("errors").Int())
		}
	}
}

// TestClientGivesUpBeforeTheFirstByte: a client that gives up while the
// engine prefills (a timeout, Esc in Claude Code) is the client's 499: the
// engine keeps its place in the rotation, and its conversation stays.
func TestClientGivesUpBeforeTheFirstByte(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f, _ := newFakeFarm(t, 2, nil, m.flags...)
			first := f.post(t, "/v1/chat/completions", chat("warm"), "x-session-affinity", "warm")
			if first.status != 200 || first.replica == "" {
				t.Fatalf("first turn: %d %q", first.status, first.replica)
			}
			for i := range 5 {
				session := fmt.Sprintf("hang-%s-%d", m.name, i)
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.envoyURL+"/v1/chat/completions", strings.NewReader(chat("x")))
				req.Header.Set("x-session-affinity", session)
				done := make(chan struct{})
				go func() {
					defer close(done)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}()
				select { // the engine has it: now the client gives up
				case <-arrived(session):
				case <-done:
					t.Fatalf("abort %d: the request was answered before it reached an engine", i)
				}
				cancel()
				<-done
			}
			st := f.settled(t)
			noEngineBlamed(t, st)
			if n := sum(st.Get("replicas.#.requests")); n != 1 {
				t.Errorf("%d turns counted, want 1 (the aborted ones are the client's 499s)", n)
			}
		})
	}
}

// TestTrailersDoNotRepeatTheBody: a request with trailers (HTTP/2) reaches
// the engine with its body once.
func TestTrailersDoNotRepeatTheBody(t *testing.T) {
	f, engines := newFakeFarm(t, 1, nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 30 * time.Second}
	body := chat("trailers")
	req, _ := http.NewRequest(http.MethodPost, f.envoyURL+"/v1/chat/completions", io.NopCloser(strings.NewReader(body)))
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Client-Trailer": {"1"}}
	req.Header.Set("x-session-affinity", "t")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Warden-Replica") == "" {
		t.Errorf("status %d, replica %q; want 200 with a pick", resp.StatusCode, resp.Header.Get("X-Warden-Replica"))
	}
	got := engines[0].got()
	if len(got) != 1 || string(got[0]) != body {
		t.Errorf("the engine got %d bodies, the first %d bytes (sent %d): %.200q", len(got), len(first(got)), len(body), first(got))
	}
}

func first(b [][]byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b[0]
}

// TestHeadersOnlyAnswerIsTheEnginesError: a 500 with no body is the
// engine's error on its replica, not a client's 499.
func TestHeadersOnlyAnswerIsTheEnginesError(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f, _ := newFakeFarm(t, 2, nil, m.flags...)
			tr := f.post(t, "/v1/chat/completions", chat("fail"), "x-session-affinity", "fail-1")
			if tr.status != 500 {
				t.Fatalf("status %d, want the engine's 500", tr.status)
			}
			st := f.settled(t)
			if n := sum(st.Get("replicas.#.errors")); n != 1 {
				t.Errorf("%d errors on the replicas, want the engine's 1", n)
			}
		})
	}
}

// TestLargeBufferedBody: with --fail-open (buffered bodies, one gRPC
// message each) a body over gRPC's default 4 MiB message limit is picked
// when under the picker's limit, and refused with the picker's 413 when
// over it: never passed on without a pick.
func TestLargeBufferedBody(t *testing.T) {
	big := `{"model":"test-model","messages":[{"role":"user","content":"` + strings.Repeat("x", 5<<20) + `"}]}`
	t.Run("under the limit", func(t *testing.T) {
		f, engines := newFakeFarm(t, 2, []string{"--max-body-bytes", "8MiB"}, "--fail-open")
		tr := f.post(t, "/v1/chat/completions", big, "x-session-affinity", "big")
		if tr.status != 200 || tr.replica == "" {
			t.Errorf("a 5 MiB body: status %d, replica %q; want 200 with a pick", tr.status, tr.replica)
		}
		if n := len(engines[0].got()) + len(engines[1].got()); n != 1 {
			t.Errorf("the engines got %d requests, want 1", n)
		}
	})
	t.Run("over the limit", func(t *testing.T) {
		f, engines := newFakeFarm(t, 2, nil, "--fail-open") // the farm's picker takes 1 MiB
		tr := f.post(t, "/v1/chat/completions", big, "x-session-affinity", "big")
		if tr.status != 413 || !strings.Contains(tr.body, "--max-body-bytes") {
			t.Errorf("a 5 MiB body over the picker's 1 MiB: status %d %.200s; want the picker's 413", tr.status, tr.body)
		}
		if n := len(engines[0].got()) + len(engines[1].got()); n != 0 {
			t.Errorf("the engines got %d requests, want none", n)
		}
	})
}

// TestEmptyChunkedPost: a chunked POST with an empty body is answered
// (by the engine, with a pick) in both modes.
func TestEmptyChunkedPost(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f, _ := newFakeFarm(t, 2, nil, m.flags...)
			conn, err := net.Dial("tcp", strings.TrimPrefix(f.envoyURL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(30 * time.Second)) // a hang fails, not blocks the suite
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-session-affinity: e\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to an empty chunked POST: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Warden-Replica") == "" {
				t.Errorf("status %d, replica %q; want the engine's 200 with a pick", resp.StatusCode, resp.Header.Get("X-Warden-Replica"))
			}
		})
	}
}

// TestModelsIsNotATurn: GET /v1/models is answered by an engine and is
// not counted as a conversation's turn.
func TestModelsIsNotATurn(t *testing.T) {
	f, _ := newFakeFarm(t, 2, nil)
	for range 3 {
		resp, err := http.Get(f.envoyURL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "test-model") {
			t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, b)
		}
	}
	st := f.settled(t)
	if n := sum(st.Get("replicas.#.requests")); n != 0 {
		t.Errorf("%d turns counted for three GET /v1/models, want 0", n)
	}
	if n := st.Get("sessions_seen").Int(); n != 0 {
		t.Errorf("%d sessions seen, want 0", n)
	}
}

// TestHundredStreamsWithAborts: a hundred streams at once through Envoy,
// one in four given up by its client before the first byte and one in
// eight in the middle of its answer: every other turn is answered,
// nothing stays in flight, no engine is taken out.
func TestHundredStreamsWithAborts(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f, _ := newFakeFarm(t, 2, nil, m.flags...)
			const n = 100
			var wg sync.WaitGroup
			errs := make(chan string, n)
			aborts := 0
			for i := range n {
				session := fmt.Sprintf("load-%d", i%20)
				switch i % 8 {
				case 3, 7:
					session, aborts = fmt.Sprintf("hang-%s-load-%d", m.name, i), aborts+1
				case 5:
					session, aborts = fmt.Sprintf("midway-%s-load-%d", m.name, i), aborts+1
				}
				wg.Go(func() {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.envoyURL+"/v1/chat/completions", strings.NewReader(chat(session)))
					req.Header.Set("x-session-affinity", session)
					if strings.HasPrefix(session, "hang") {
						go func() { // given up once an engine has it
							select {
							case <-arrived(session):
								cancel()
							case <-ctx.Done():
							}
						}()
					}
					resp, err := http.DefaultClient.Do(req)
					if strings.HasPrefix(session, "midway") { // the first event read, then the client goes
						if err == nil {
							bufio.NewReader(resp.Body).ReadString('\n')
							cancel()
							resp.Body.Close()
						}
						return
					}
					if strings.HasPrefix(session, "hang") {
						if err == nil {
							resp.Body.Close()
						}
						return
					}
					if err != nil {
						errs <- fmt.Sprintf("%s: %v", session, err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") || resp.Header.Get("X-Warden-Replica") == "" {
						errs <- fmt.Sprintf("%s: status %d, replica %q", session, resp.StatusCode, resp.Header.Get("X-Warden-Replica"))
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			st := f.settled(t)
			noEngineBlamed(t, st)
			if got := sum(st.Get("replicas.#.requests")); got != int64(n-aborts) {
				t.Errorf("%d turns counted, want the %d answered", got, n-aborts)
			}
		})
	}
}
