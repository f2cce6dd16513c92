package router

// The core's own tests: placement driven without a data plane, the
// balancer's refresh, and the decision log's writer. The core's behaviour
// as clients reach it (placement, holds, the session table, membership,
// scrapes, cache wipes, the decision log) is tested through real HTTP in
// package router_test (http_fixture_test.go); the HTTP data plane's own
// behaviour is proxy's tests.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

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

// testCore is a core over n replicas at unused loopback ports (nothing is
// scraped: Run is not called).
func testCore(tb testing.TB, cfg Config, n int) *Core {
	var bs []Backend
	for i := range n {
		bs = append(bs, Backend{Rank: i, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), MaxNumSeqs: 32})
	}
	return testCoreBackends(tb, cfg, bs)
}

func testCoreBackends(tb testing.TB, cfg Config, bs []Backend) *Core {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(cfg, bs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.CloseDecisionLog() })
	return c
}

// gathered is the value of the metric name (summed over its series) in reg.
func gathered(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += value(m)
		}
	}
	return sum
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// readDecisions parses every line of the decision log files.
func readDecisions(t *testing.T, paths ...string) []decision.Line {
	t.Helper()
	lines, err := decision.ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func testDecision(i int) decision.Record {
	return decision.Record{At: time.Unix(int64(i), 0), RequestID: fmt.Sprintf("req-%d", i), Source: identity.SourceClaudeHeader,
		Key: fmt.Sprintf("session-%d", i%50), Policy: place.PolicyAdaptive, Route: string(place.ReasonSticky), Replica: i % 4,
		Prompt: 12_000, Cached: 11_000, Completion: 256, TTFT: 300 * time.Millisecond, Duration: 4 * time.Second, Status: 200}
}

// TestDecisionLogRotates: at the size limit the file is rotated into
// name-<time>.jsonl backups, at line boundaries, keeping three.
func TestDecisionLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.jsonl")
	w, err := openDecisionLog(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16_000 // ~4.8 MB: four rotations at 1 MB
	l := newDecisionLog(w, n, slog.New(slog.DiscardHandler), time.Now)
	for i := range n {
		l.add(testDecision(i))
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if d := l.dropped.Load(); d != 0 {
		t.Fatalf("%d dropped with room for all", d)
	}
	var backups []string
	simproc.Poll(t, "three backups kept", func() bool { // lumberjack removes old ones in the background
		backups, _ = filepath.Glob(filepath.Join(dir, "decisions-*.jsonl"))
		return len(backups) == decisionBackups
	})
	files := append(backups, path)
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 || st.Size() == 0 {
			t.Errorf("%s: %d bytes, want (0, 1 MiB]", f, st.Size())
		}
	}
	lines := readDecisions(t, files...) // every line whole
	if len(lines) >= n || len(lines) < n/2 {
		t.Errorf("%d lines kept of %d, want the newest files' only", len(lines), n)
	}
	if last := lines[len(lines)-1]; last.RequestID != fmt.Sprintf("req-%d", n-1) {
		t.Errorf("current file ends with %q", last.RequestID)
	}
}

// blockedWriter blocks every Write until release is closed.
type blockedWriter struct {
	entered chan struct{}
	release chan struct{}
	delay   time.Duration // per write, after release
	mu      sync.Mutex
	buf     bytes.Buffer
	closed  bool
}

func (w *blockedWriter) Write(b []byte) (int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.release
	time.Sleep(w.delay)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func (w *blockedWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

func (w *blockedWriter) lines() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Count(w.buf.Bytes(), []byte("\n"))
}

// TestDecisionLogCloseFlushes: closing writes every buffered line, even
// through a slow disk, then closes the file; later lines and closes are
// harmless.
func TestDecisionLogCloseFlushes(t *testing.T) {
	w := &blockedWriter{entered: make(chan struct{}, 1), release: make(chan struct{}), delay: 5 * time.Millisecond}
	l := newDecisionLog(w, 100, slog.New(slog.DiscardHandler), time.Now)
	for i := range 60 {
		l.add(testDecision(i))
	}
	close(w.release)
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if got := w.lines(); got != 60 || !w.closed {
		t.Errorf("%d lines (closed %v) after close, want 60", got, w.closed)
	}
	l.add(testDecision(61))
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if got := w.lines(); got != 60 {
		t.Errorf("%d lines after a late add", got)
	}
}

// BenchmarkDecisionLogAdd is the request path's share of the decision log:
// handing one decision to the writer (the buffer is emptied with the timer
// stopped, so every add is taken); router/decision's BenchmarkDecisionLogEncode is the
// writer's work per line, off the request path.
func BenchmarkDecisionLogAdd(b *testing.B) {
	l := &decisionLog{ch: make(chan decision.Record, decisionBuffer), log: slog.New(slog.DiscardHandler), clock: time.Now}
	d := testDecision(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if len(l.ch) == cap(l.ch) {
			b.StopTimer()
			for len(l.ch) > 0 {
				<-l.ch
			}
			b.StartTimer()
		}
		l.add(d)
	}
	if n := l.dropped.Load(); n > 0 {
		b.Fatalf("%d dropped", n)
	}
}

// TestDecisionLogFullBufferDrops: with the writer stuck on the disk,
// requests go on at full speed; the lines that do not fit in the buffer are
// dropped, counted on /metrics and warned about once.
func TestDecisionLogFullBufferDrops(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	c := testCore(t, Config{Clock: clk.now, Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))}, 1)
	w := &blockedWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	c.decisions = newDecisionLog(w, 2, c.log, c.clock) // before any request
	if err := c.decisions.register(c.cfg.Registry); err != nil {
		t.Fatal(err)
	}
	const n = 12
	for i := range n {
		pl := c.Place(context.Background(), place.Request{Key: "s"})
		c.Finish(&pl, Outcome{Status: 200, Start: clk.now(), RequestID: fmt.Sprint(i)})
		if i == 0 {
			<-w.entered // the writer holds the first line
		}
	}
	dropped := c.decisions.dropped.Load()
	if dropped < n-3 {
		t.Errorf("dropped %d of %d with room for 3 (one writing, two buffered)", dropped, n)
	}
	if got := gathered(t, c.cfg.Registry, "warden_decision_log_dropped_total"); got != float64(dropped) {
		t.Errorf("warden_decision_log_dropped_total = %v, want %d", got, dropped)
	}
	close(w.release)
	if err := c.CloseDecisionLog(); err != nil {
		t.Fatal(err)
	}
	if got := w.lines(); uint64(got) != n-dropped || !w.closed {
		t.Errorf("%d lines written (closed %v), want %d", got, w.closed, n-dropped)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if c := strings.Count(logs.String(), "decision log is behind"); c != 1 {
		t.Errorf("%d drop warnings within a minute, want 1:\n%s", c, logs.String())
	}
}

// TestOffSeesTheLoadOfTheLastTick checks the vLLM-style balancer's view is
// the sample of the last periodic refresh plus what was sent since, not the
// exact load at the decision: a closed-loop session whose turn just ended
// still counts on its replica until the next tick, so `off` does not send
// its next turn home by accident. Without the tick (tests, no Run loop) the
// view is refreshed at the decision once it is older than the interval.
func TestOffSeesTheLoadOfTheLastTick(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ticking bool
		want    int
	}{
		{"with Run's tick the finished turn still counts: next turn goes to replica 1", true, 1},
		{"refreshed at the decision both look idle: the tie goes to the scan start, 0", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_000_000, 0)}
			var bs []Backend
			for i := range 2 {
				bs = append(bs, Backend{Rank: i, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), MaxNumSeqs: 32})
			}
			p := testCoreBackends(t, Config{Policy: place.PolicyOff, Clock: clk.now, BalancerInterval: 100 * time.Millisecond}, bs)
			if tc.ticking { // Run's tick, which never fires on its own here: the test ticks
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go p.placer.TickBalancers(ctx, time.Hour)
				simproc.Poll(t, "the tick to start", func() bool { return p.placer.Counts(clk.now(), nil).Ticking })
			}

			first := p.placer.Decide(place.Request{Key: "a"})
			if first.Rank != 0 {
				t.Fatalf("first turn on an idle pair went to %d, want 0 (the scan starts at 0)", first.Rank)
			}
			// Another conversation's short turn: replica 0 is busy, so 1; it
			// ends before the tick. Two routed requests put vLLM's rotating
			// scan start back at 0.
			other := p.placer.Decide(place.Request{Key: "b"})
			if other.Rank != 1 {
				t.Fatalf("the other turn went to %d, want 1", other.Rank)
			}
			other.Replica.inflight.Add(-1)
			p.placer.RefreshBalancers()    // a tick while the first turn runs: 0 busy, 1 idle
			first.Replica.inflight.Add(-1) // the turn ends
			clk.add(time.Second)           // long past the interval, but no tick since
			second := p.placer.Decide(place.Request{Key: "a"})
			if second.Rank != tc.want {
				t.Errorf("second turn went to replica %d, want %d", second.Rank, tc.want)
			}
		})
	}
}

// TestRunTicksTheBalancer checks Run takes over the refresh and hands it
// back when it ends.
func TestRunTicksTheBalancer(t *testing.T) {
	p := testCoreBackends(t, Config{Policy: place.PolicyOff, BalancerInterval: time.Millisecond},
		[]Backend{{Rank: 0, URL: "http://127.0.0.1:9", MaxNumSeqs: 32}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	simproc.Poll(t, "Run to tick the balancer", func() bool {
		c := p.placer.Counts(p.Now(), nil)
		return c.Ticking && !c.LastRefresh.IsZero()
	})
	cancel()
	<-done
	simproc.Poll(t, "the tick to stop", func() bool { return !p.placer.Counts(p.Now(), nil).Ticking })
}

// BenchmarkPlace is the whole critical section at 8 replicas (snapshot,
// session lookup in a 10k table, decision, in-flight increment) and the
// end of the request (the Placer's Decide and End).
func BenchmarkPlace(b *testing.B) {
	var bs []Backend
	for i := range 8 {
		bs = append(bs, Backend{Rank: i, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), MaxNumSeqs: 256})
	}
	keys := make([]place.Request, 10_000)
	for i := range keys {
		keys[i] = place.Request{Key: fmt.Sprintf("session-%d", i)}
	}
	for _, pol := range []string{place.PolicyAdaptive, place.PolicySticky} {
		b.Run(pol, func(b *testing.B) {
			p := testCoreBackends(b, Config{Policy: pol}, bs)
			i := 0
			for b.Loop() {
				pl := p.placer.Decide(keys[i%len(keys)])
				p.placer.End(&pl, false, place.Report{}, -1) // the request ends, as forward's accounting does
				pl.Replica.inflight.Add(-1)
				i++
			}
		})
	}
}

// TestScrapeAsksForTheSeriesItReads: an engine's series are asked for by
// name at /metrics/ (where vLLM's prometheus_client app filters them); a
// server that has no /metrics/ (the simulator, another warden) is read
// whole from then on, after one try.
func TestScrapeAsksForTheSeriesItReads(t *testing.T) {
	for _, tc := range []struct {
		name      string
		filters   bool // serves /metrics/ with name[] as vLLM does
		wantPaths []string
	}{
		{"vLLM", true, []string{"/metrics/", "/metrics/"}},
		{"no /metrics/", false, []string{"/metrics/", "/metrics", "/metrics"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			var names []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/health" || r.URL.Path == "/v1/models" {
					return
				}
				mu.Lock()
				paths = append(paths, r.URL.Path)
				if r.URL.Path == "/metrics/" {
					names = r.URL.Query()["name[]"]
				}
				mu.Unlock()
				if r.URL.Path == "/metrics/" && !tc.filters {
					http.NotFound(w, r)
					return
				}
				io.WriteString(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n")
			}))
			defer srv.Close()
			c := testCoreBackends(t, Config{}, []Backend{{Rank: 0, URL: srv.URL, MaxNumSeqs: 32}})
			c.CheckNow(context.Background())
			c.CheckNow(context.Background())
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tc.wantPaths, paths); diff != "" {
				t.Errorf("paths of two checks (-want +got):\n%s", diff)
			}
			for _, want := range []string{"vllm:num_requests_running", "vllm:prefix_cache_hits_total", "vllm:cache_config_info"} {
				if !slices.Contains(names, want) {
					t.Errorf("the filtered scrape does not ask for %s: %v", want, names)
				}
			}
			if got := c.Status().Replicas[0].Running; got != 2 {
				t.Errorf("running %v, want 2", got)
			}
		})
	}
}

// dpServer is a vLLM server run with --data-parallel-size 2 as its /metrics
// shows it (vLLM 0.32, CPU build): every series per engine, and /metrics/
// with name[] answered empty. It counts the GETs of /metrics.
func dpServer(t *testing.T, scrapes *int) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			mu.Lock()
			*scrapes++
			mu.Unlock()
			io.WriteString(w, `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 26.0
vllm:prompt_tokens_total{engine="1",model_name="tiny"} 52.0
`)
		case "/metrics/":
			// empty, as vLLM's multiprocess collector answers name[]
		case "/inference/v1/config":
			io.WriteString(w, `{"scheduler":{"max_num_seqs":128}}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLearnsTheEnginesOfADataParallelServer(t *testing.T) {
	scrapes := 0
	srv := dpServer(t, &scrapes)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/metrics") {
			io.WriteString(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 5\n")
		}
	}))
	defer plain.Close()
	c := testCoreBackends(t, Config{}, []Backend{
		{Rank: 0, URL: srv.URL, Probe: true, LearnDP: true, FallbackMaxNumSeqs: 8},
		{Rank: 1, URL: plain.URL, Probe: true, LearnDP: true, FallbackMaxNumSeqs: 8},
	})
	c.CheckNow(context.Background())
	type row struct {
		Rank    int
		DPRank  int // -1 = not pinned
		URL     string
		Up      bool
		Running float64
		Seqs    int
	}
	var got []row
	for _, r := range c.Status().Replicas {
		dp := -1
		if r.DPRank != nil {
			dp = *r.DPRank
		}
		got = append(got, row{r.Rank, dp, r.URL, r.Up, r.Running, r.MaxNumSeqs})
	}
	want := []row{{0, 0, srv.URL, true, 3, 128}, {1, -1, plain.URL, true, 5, 8}, {2, 1, srv.URL, true, 1, 128}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("replicas after the first check (-want +got):\n%s", diff)
	}
	if k := c.Lookup(2).Key(); k != srv.URL+"#dp_rank=1" {
		t.Errorf("key of engine 1: %q", k)
	}
	if v := c.Lookup(2).DPRank(); !slices.Equal(v, []string{"1"}) || c.Lookup(1).DPRank() != nil {
		t.Errorf("rank header values: %q and %q, want [1] and none", v, c.Lookup(1).DPRank())
	}
	before := scrapes
	c.CheckNow(context.Background())
	if n := scrapes - before; n != 1 {
		t.Errorf("one check of a server with two engines read its /metrics %d times, want once", n)
	}
	info, err := c.RemoveReplica(srv.URL, -1)
	if err != nil || len(c.Replicas()) != 1 || info.Rank != 0 {
		t.Errorf("removing the server's URL: %+v, %v; %d replicas left, want 1", info, err, len(c.Replicas()))
	}
	if _, err := c.AddReplica(Backend{URL: srv.URL + "#dp_rank=1", Probe: true}); err != nil {
		t.Fatal(err)
	}
	if r := c.Lookup(2); r == nil || r.Key() != srv.URL+"#dp_rank=1" {
		t.Errorf("engine 1 re-added did not get its rank 2 back: %v", c.Status().Replicas)
	}
}

func TestParseReplicaDataParallel(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    Backend
		wantErr string
	}{
		{"http://h:8000#dp=4", Backend{URL: "http://h:8000", DP: 4}, ""},
		{"http://h:8000#dp_rank=1&max_num_seqs=64", Backend{URL: "http://h:8000", DPPinned: true, DPRank: 1, MaxNumSeqs: 64}, ""},
		{"http://h:8000#dp=2&dp_rank=2", Backend{}, "not one of the server's 2 engines"},
		{"http://h:8000#dp=0", Backend{}, "positive integer"},
		{"http://h:8000#dp_rank=-1", Backend{}, "0 or more"},
	} {
		got, err := ParseReplica(tc.spec)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one with %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !cmp.Equal(tc.want, got) {
			t.Errorf("%s: %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	ex := Backend{URL: "http://h:8000", DP: 3}.ExpandDP()
	if len(ex) != 3 || !ex[2].DPPinned || ex[2].DPRank != 2 || ex[0].DPRank != 0 {
		t.Errorf("ExpandDP of dp=3: %+v", ex)
	}
	if one := (Backend{URL: "http://h:8000", DP: 1}).ExpandDP(); len(one) != 1 || one[0].DPPinned {
		t.Errorf("ExpandDP of dp=1: %+v, want the server as one replica", one)
	}
}
