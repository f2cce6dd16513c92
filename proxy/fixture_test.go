package proxy

// The proxy tests' fixtures: a fake engine, a proxy in front of fakes,
// request helpers and the ids they share.

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
)

const (
	ccID    = "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c" // a Claude Code session id
	billing = `{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli;"}`
)

// fakeEngine is an httptest vLLM stand-in: /health, /metrics, and chat /
// messages endpoints that answer with fixed usage (prompt 100, cached 64,
// completion 3) and record what they received.
type fakeEngine struct {
	srv     *httptest.Server
	metrics atomic.Value  // string
	hold    chan struct{} // when non-nil, completions wait on it (or the request's cancel)
	arrived chan struct{} // a request started (buffered)
	gone    chan struct{} // a request's context was cancelled (buffered)

	mu     sync.Mutex
	bodies []string
	heads  []http.Header
	resets int
}

func newFakeEngine(t testing.TB) *fakeEngine {
	f := &fakeEngine{arrived: make(chan struct{}, 1000), gone: make(chan struct{}, 1000)}
	f.metrics.Store(metricsText(0, 0, 0.1, 100, 50))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, f.metrics.Load().(string)) })
	mux.HandleFunc("POST /reset_prefix_cache", func(http.ResponseWriter, *http.Request) {
		f.mu.Lock()
		f.resets++
		f.mu.Unlock()
	})
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	mux.HandleFunc("POST /v1/messages", f.messages)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func metricsText(running, waiting, kv, queries, hits float64) string {
	return fmt.Sprintf(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %g
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %g
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} %g
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %g
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %g
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2500"} 1
`, running, waiting, kv, queries, hits)
}

// record stores the request and waits while the engine is held.
func (f *fakeEngine) record(w http.ResponseWriter, r *http.Request) (string, bool) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	if len(f.bodies) < 1000 {
		f.bodies = append(f.bodies, string(b))
		f.heads = append(f.heads, r.Header.Clone())
	}
	f.mu.Unlock()
	select {
	case f.arrived <- struct{}{}:
	default: // nobody is counting (benchmarks)
	}
	if !json.Valid(b) {
		http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
		return "", false
	}
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-r.Context().Done():
			f.gone <- struct{}{}
			return "", false
		}
	}
	return string(b), true
}

const usageJSON = `{"prompt_tokens":100,"completion_tokens":3,"total_tokens":103,"prompt_tokens_details":{"cached_tokens":64}}`

func (f *fakeEngine) chat(w http.ResponseWriter, r *http.Request) {
	body, ok := f.record(w, r)
	if !ok {
		return
	}
	if !gjson.Get(body, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"abc"}}],"usage":`+usageJSON+`}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, tok := range []string{"a", "b", "c"} {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}],\"usage\":null}\n\n", tok)
		fl.Flush()
	}
	if gjson.Get(body, "stream_options.include_usage").Bool() {
		io.WriteString(w, "data: {\"id\":\"c1\",\"choices\":[],\"usage\":"+usageJSON+"}\n\n")
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func (f *fakeEngine) messages(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.record(w, r); !ok {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":200,\"cache_read_input_tokens\":160,\"output_tokens\":0}}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n"+
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}

func (f *fakeEngine) lastBody() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		return ""
	}
	return f.bodies[len(f.bodies)-1]
}

func (f *fakeEngine) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

// testConfig is the settings of a test's router core and of the proxy in
// front of it.
type testConfig struct {
	router.Config
	Proxy Config
}

// newProxy builds a router core over the backends and the proxy in front
// of it, as serve does.
func newProxy(cfg testConfig, bs []router.Backend) (*Proxy, error) {
	core, err := router.New(cfg.Config, bs)
	if err != nil {
		return nil, err
	}
	return New(core, cfg.Proxy)
}

// coreOf is the router core p places through.
func coreOf(p *Proxy) *router.Core { return p.core.(*router.Core) }

// testProxy builds a proxy over the engines (rank = index) with a frontend.
func testProxy(t testing.TB, cfg testConfig, engines ...*fakeEngine) (*Proxy, *httptest.Server) {
	t.Helper()
	var bs []router.Backend
	for i, e := range engines {
		bs = append(bs, router.Backend{Rank: i, URL: e.srv.URL, MaxNumSeqs: 32})
	}
	return testProxyBackends(t, cfg, bs)
}

func testProxyBackends(t testing.TB, cfg testConfig, bs []router.Backend) (*Proxy, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewPedanticRegistry()
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	p, err := newProxy(cfg, bs)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p.Handler())
	t.Cleanup(front.Close)
	return p, front
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// post sends a JSON body with headers (name, value pairs) and returns the
// response with its body read.
func post(t testing.TB, url, body string, kv ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i < len(kv); i += 2 {
		req.Header[kv[i]] = []string{kv[i+1]} // as written: keeps session_id un-canonicalised
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// settled waits until no request is in flight, i.e. all are accounted.
func settled(t *testing.T, p *Proxy) {
	t.Helper()
	simproc.Poll(t, "no request in flight", func() bool { return coreOf(p).Status().InFlight == 0 })
}

func chatBody(session string, stream bool, extra string) string {
	return fmt.Sprintf(`{"model":"m","stream":%v,"prompt_cache_key":%q,"messages":[{"role":"user","content":"hello"}]%s}`, stream, session, extra)
}

// metric is the value of the series of name in reg whose labels include
// the pairs given (name, value, ...), summed; and how many series matched.
func metric(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) (float64, int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, n := 0.0, 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			n++
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum, n
}

// mustPrepare is p.prepare for a request whose pin (none) cannot fail.
func mustPrepare(t testing.TB, p *Proxy, r *http.Request, body []byte) *request {
	t.Helper()
	req, err := p.prepare(r, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
