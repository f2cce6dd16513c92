package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// readDecisions parses every line of the decision log files.
func readDecisions(t *testing.T, paths ...string) []decision.Line {
	t.Helper()
	var out []decision.Line
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l decision.Line
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&l); err != nil {
				t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
			}
			out = append(out, l)
		}
	}
	return out
}

func byRequestID(t *testing.T, lines []decision.Line) map[string]decision.Line {
	t.Helper()
	m := map[string]decision.Line{}
	for _, l := range lines {
		if _, dup := m[l.RequestID]; dup {
			t.Errorf("request id %q logged twice", l.RequestID)
		}
		m[l.RequestID] = l
	}
	return m
}

// TestDecisionLogLines: a new conversation's first turn, its sticky second
// turn, a subagent's turn and a request without an id, through real HTTP,
// each get one line with the decision, the usage and the times; the raw
// session key is never written.
func TestDecisionLogLines(t *testing.T) {
	e0, e1 := newFakeEngine(t), newFakeEngine(t)
	clk := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)}
	path := filepath.Join(t.TempDir(), "logs", "decisions.jsonl") // the folder is made
	p, front := testProxy(t, Config{Policy: place.PolicySticky, Clock: clk.now, DecisionLog: path}, e0, e1)
	const secret = "alice@example.com" // a person's id as session key
	url := front.URL + "/v1/chat/completions"
	if resp, _ := post(t, url, chatBody(secret, false, ""), "X-Request-Id", "t-1"); resp.StatusCode != 200 {
		t.Fatalf("turn 1: %d", resp.StatusCode)
	}
	settled(t, p) // accounted (the client may have the answer first)
	clk.add(time.Second)
	if resp, _ := post(t, url, chatBody(secret, true, ""), "X-Request-Id", "t-2"); resp.StatusCode != 200 {
		t.Fatalf("turn 2: %d", resp.StatusCode)
	}
	if resp, _ := post(t, url, chatBody("other", false, "")); resp.StatusCode != 200 {
		t.Fatalf("no id: %d", resp.StatusCode)
	}
	sub := `{"model":"m","stream":true,"messages":[{"role":"user","content":"task"}]}`
	if resp, _ := post(t, front.URL+"/v1/messages", sub, "X-Claude-Code-Session-Id", "cc-parent",
		"x-claude-code-agent-id", "agent-7", "X-Request-Id", "sub-1"); resp.StatusCode != 200 {
		t.Fatalf("subagent: %d", resp.StatusCode)
	}
	settled(t, p)
	if err := p.CloseDecisionLog(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if bytes.Contains(raw, []byte(secret)) || bytes.Contains(raw, []byte("cc-parent")) {
		t.Errorf("the raw session key is in the log:\n%s", raw)
	}
	t.Logf("%s", raw)
	lines := byRequestID(t, readDecisions(t, path))
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), raw)
	}
	first, second, none, subagent := lines["t-1"], lines["t-2"], lines[""], lines["sub-1"]
	if first.Route != string(place.ReasonNew) || second.Route != string(place.ReasonSticky) || first.Replica != second.Replica {
		t.Errorf("turns: %+v then %+v, want new then sticky on the same replica", first, second)
	}
	for _, l := range []decision.Line{first, second, none} {
		if l.Source != identity.SourcePromptCacheKey || l.Policy != place.PolicySticky || l.Status != 200 || l.Subagent ||
			l.Prompt != 100 || l.Cached != 64 || l.Completion != 3 || l.WaitS != 0 {
			t.Errorf("line %+v", l)
		}
		if l.TTFBS < 0 || l.DurationS < l.TTFBS {
			t.Errorf("%q: ttfb %v, duration %v", l.RequestID, l.TTFBS, l.DurationS)
		}
	}
	if first.Session != decision.Session(secret) || second.Session != first.Session || len(first.Session) != 12 || none.Session == first.Session {
		t.Errorf("session hashes %q %q %q", first.Session, second.Session, none.Session)
	}
	if at, err := time.Parse(time.RFC3339Nano, first.Time); err != nil || !at.Equal(time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)) {
		t.Errorf("time %q (%v), want the proxy's clock", first.Time, err)
	}
	if at, _ := time.Parse(time.RFC3339Nano, second.Time); !at.Equal(time.Date(2030, 1, 2, 3, 4, 6, 600, time.UTC)) {
		t.Errorf("second time %q, want a second later", second.Time)
	}
	if !subagent.Subagent || subagent.Source != identity.SourceClaudeHeader || subagent.Route != string(place.ReasonNew) ||
		subagent.Prompt != 200 || subagent.Cached != 160 || subagent.Completion != 7 ||
		subagent.Session != decision.Session("cc-parent"+identity.AgentSeparator+"agent-7") {
		t.Errorf("subagent line %+v", subagent)
	}
}

// TestDecisionLogRecordsWait: a new conversation held at the warden for KV
// room (as in TestHoldForRoom) records how long it was held.
func TestDecisionLogRecordsWait(t *testing.T) {
	e := newFakeEngine(t)
	e.hold = make(chan struct{})
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	p, front := testProxy(t, Config{Clock: clk.now, AdmitWait: time.Hour, DecisionLog: path}, e)
	p.CheckNow(context.Background())
	send := func(id, key string, n int, done chan<- int) {
		req, _ := httpRequest(context.Background(), front.URL+"/v1/chat/completions", bigChat(key, n))
		req.Header.Set("X-Request-Id", id)
		resp, err := front.Client().Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}
	doneA, doneB := make(chan int, 1), make(chan int, 1)
	go send("a", "a", 120_000, doneA)
	<-e.arrived
	go send("b", "b", 80_000, doneB)
	simproc.Poll(t, "b held at the proxy", func() bool { return held(p) == 1 })
	clk.add(2500 * time.Millisecond)
	close(e.hold)
	if a, b := <-doneA, <-doneB; a != 200 || b != 200 {
		t.Fatalf("status a %d, b %d", a, b)
	}
	settled(t, p)
	if err := p.CloseDecisionLog(); err != nil {
		t.Fatal(err)
	}
	lines := byRequestID(t, readDecisions(t, path))
	if a, b := lines["a"], lines["b"]; a.WaitS != 0 || b.WaitS != 2.5 || b.Route != string(place.ReasonNew) || b.Policy != place.PolicyAdaptive {
		t.Errorf("a %+v\nb %+v\nwant b held 2.5 s, then new", a, b)
	}
}

func testDecision(i int) decision.Record {
	return decision.Record{At: time.Unix(int64(i), 0), RequestID: fmt.Sprintf("req-%d", i), Source: identity.SourceClaudeHeader,
		Key: fmt.Sprintf("session-%d", i%50), Policy: place.PolicyAdaptive, Route: string(place.ReasonSticky), Replica: i % 4,
		Prompt: 12_000, Cached: 11_000, Completion: 256, TTFB: 300 * time.Millisecond, Duration: 4 * time.Second, Status: 200}
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

// TestDecisionLogFullBufferDrops: with the writer stuck on the disk,
// requests go on at full speed; the lines that do not fit in the buffer are
// dropped, counted on /metrics and warned about once.
func TestDecisionLogFullBufferDrops(t *testing.T) {
	e := newFakeEngine(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	p, front := testProxy(t, Config{Clock: clk.now, Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))}, e)
	w := &blockedWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p.decisions = newDecisionLog(w, 2, p.log, p.clock) // before any request
	if err := p.decisions.register(p.cfg.Registry); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second} // a request blocked on the log fails here
	const n = 12
	for i := range n {
		req, _ := httpRequest(context.Background(), front.URL+"/v1/chat/completions", chatBody("s", false, ""))
		req.Header.Set("X-Request-Id", fmt.Sprint(i))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i == 0 {
			<-w.entered // the writer holds the first line
		}
	}
	settled(t, p)
	dropped := p.decisions.dropped.Load()
	if dropped < n-3 {
		t.Errorf("dropped %d of %d with room for 3 (one writing, two buffered)", dropped, n)
	}
	resp, metrics := get(t, front.URL+"/metrics")
	if resp.StatusCode != 200 || !strings.Contains(metrics, fmt.Sprintf("warden_decision_log_dropped_total %d\n", dropped)) {
		t.Errorf("/metrics lacks the drop count %d", dropped)
	}
	close(w.release)
	if err := p.CloseDecisionLog(); err != nil {
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

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
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

// TestDecisionLogConfig: a negative size is refused; a path that cannot be
// a file fails New at once; off, nothing is opened or registered.
func TestDecisionLogConfig(t *testing.T) {
	if err := (Config{DecisionLogMaxMB: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "--decision-log-max-mb") {
		t.Errorf("Validate: %v", err)
	}
	e := newFakeEngine(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := New(Config{DecisionLog: filepath.Join(file, "decisions.jsonl")}, []Backend{{Rank: 0, URL: e.srv.URL}}); err == nil ||
		!strings.Contains(err.Error(), "--decision-log") {
		t.Errorf("New with a path under a file: %v", err)
	}
	p, front := testProxy(t, Config{}, e)
	if p.decisions != nil || p.CloseDecisionLog() != nil {
		t.Error("decision log on without --decision-log")
	}
	if _, m := get(t, front.URL+"/metrics"); strings.Contains(m, "warden_decision_log") {
		t.Error("decision log metric registered while off")
	}
}

// BenchmarkOverheadDecisionLog compares the warden with the decision log on
// and off over the same engine, side by side: each iteration sends one
// request through each, in alternating order (as warden-vs-bare in
// BenchmarkOverhead), so the machine's drift falls on both alike. ns/op is
// the pair; log/nolog is the ratio of their total times.
func BenchmarkOverheadDecisionLog(b *testing.B) {
	e := newFakeEngine(b)
	logged, front := testProxy(b, Config{DecisionLog: filepath.Join(b.TempDir(), "decisions.jsonl")}, e)
	_, plain := testProxy(b, Config{}, e)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	once := func(b *testing.B, srv *httptest.Server, body string) (ttfb, total time.Duration) {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "bench-1")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadByte(); err != nil {
			b.Fatal(err)
		}
		ttfb = time.Since(start)
		io.Copy(io.Discard, br)
		resp.Body.Close()
		return ttfb, time.Since(start)
	}
	for _, stream := range []bool{false, true} {
		body := chatBody("bench", stream, "")
		b.Run(fmt.Sprintf("stream=%v/log-vs-nolog", stream), func(b *testing.B) {
			offTTFB, offT, onTTFB, onT := sideBySide(b, func(first bool) (time.Duration, time.Duration) {
				if first {
					return once(b, plain, body)
				}
				return once(b, front, body)
			})
			b.ReportMetric(float64(onT)/float64(offT), "log/nolog")
			b.ReportMetric(float64(onTTFB)/float64(offTTFB), "ttfb-log/nolog")
			b.ReportMetric(float64(onT.Nanoseconds())/float64(b.N), "log-ns/req")
			b.ReportMetric(float64(offT.Nanoseconds())/float64(b.N), "nolog-ns/req")
		})
	}
	if err := logged.CloseDecisionLog(); err != nil {
		b.Fatal(err)
	}
	if n := logged.decisions.dropped.Load(); n > 0 {
		b.Logf("%d lines dropped", n)
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
