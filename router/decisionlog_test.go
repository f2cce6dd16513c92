package router_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// readDecisions parses every line of the decision log files.
func readDecisions(t *testing.T, paths ...string) []decision.Line {
	t.Helper()
	lines, err := decision.ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return lines
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
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky, Clock: clk.now, DecisionLog: path}}, e0, e1)
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
	if err := coreOf(p).CloseDecisionLog(); err != nil {
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
		if l.TTFTS < 0 || l.DurationS < l.TTFTS {
			t.Errorf("%q: ttfb %v, duration %v", l.RequestID, l.TTFTS, l.DurationS)
		}
	}
	if first.Session != decision.Session(secret) || second.Session != first.Session || len(first.Session) != 12 || none.Session == first.Session {
		t.Errorf("session hashes %q %q %q", first.Session, second.Session, none.Session)
	}
	if at, err := time.Parse(time.RFC3339Nano, first.Time); err != nil || !at.Equal(time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)) {
		t.Errorf("time %q (%v), want the core's clock", first.Time, err)
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
	p, front := testProxy(t, testConfig{Config: router.Config{Clock: clk.now, AdmitWait: time.Hour, DecisionLog: path}}, e)
	coreOf(p).CheckNow(context.Background())
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
	simproc.Poll(t, "b held at the warden", func() bool { return held(p) == 1 })
	clk.add(2500 * time.Millisecond)
	close(e.hold)
	if a, b := <-doneA, <-doneB; a != 200 || b != 200 {
		t.Fatalf("status a %d, b %d", a, b)
	}
	settled(t, p)
	if err := coreOf(p).CloseDecisionLog(); err != nil {
		t.Fatal(err)
	}
	lines := byRequestID(t, readDecisions(t, path))
	if a, b := lines["a"], lines["b"]; a.WaitS != 0 || b.WaitS != 2.5 || b.Route != string(place.ReasonNew) || b.Policy != place.PolicyAdaptive {
		t.Errorf("a %+v\nb %+v\nwant b held 2.5 s, then new", a, b)
	}
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

// TestDecisionLogConfig: a negative size is refused; a path that cannot be
// a file fails New at once; off, nothing is opened or registered.
func TestDecisionLogConfig(t *testing.T) {
	if err := (testConfig{Config: router.Config{DecisionLogMaxMB: -1}}).Validate(); err == nil || !strings.Contains(err.Error(), "--decision-log-max-mb") {
		t.Errorf("Validate: %v", err)
	}
	e := newFakeEngine(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := newProxy(testConfig{Config: router.Config{DecisionLog: filepath.Join(file, "decisions.jsonl")}}, []router.Backend{{Rank: 0, URL: e.srv.URL}}); err == nil ||
		!strings.Contains(err.Error(), "--decision-log") {
		t.Errorf("New with a path under a file: %v", err)
	}
	p, front := testProxy(t, testConfig{}, e)
	if coreOf(p).LogsDecisions() || coreOf(p).CloseDecisionLog() != nil {
		t.Error("decision log on without --decision-log")
	}
	if _, m := get(t, front.URL+"/metrics"); strings.Contains(m, "warden_decision_log") {
		t.Error("decision log metric registered while off")
	}
}
