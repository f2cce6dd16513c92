package bench

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/place"
)

// readCSV returns the header and rows of a CSV file as maps.
func readCSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// TestRequestIDPerTurn: every turn sends its own request id, named by
// session id, subagent id and turn as turns.csv names the turn.
func TestRequestIDPerTurn(t *testing.T) {
	f, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 2)
	cfg.Turns = 2
	cfg.Subagents = Subagents{Share: 1, N: 2, Turns: 1, SystemTokens: 100, TaskMin: 50, TaskMax: 60}
	res := runBench(t, cfg, false)
	f.mu.Lock()
	sent := map[string]int{}
	for _, r := range f.reqs {
		sent[r.Header.Get(RequestIDHeader)]++
	}
	f.mu.Unlock()
	subagents := 0
	for _, tr := range res.Turns {
		id := tr.RequestID()
		if n := sent[id]; n != 1 {
			t.Errorf("turn %+v: request id %q sent %d times, want once", tr, id, n)
		}
		subagents += btoi(tr.Subagent)
	}
	if len(sent) != len(res.Turns) || subagents == 0 {
		t.Errorf("%d ids for %d turns (%d of subagents)", len(sent), len(res.Turns), subagents)
	}
}

// TestJoinDecisionsFromWarden: the bench runs an A/B against the real proxy
// with --decision-log over two fake engines; turns-decisions.csv has every
// turn's line: the variant's policy, the route (a new conversation's first
// turn new, its follow-ups sticky under sticky), and the replica the
// client was told.
func TestJoinDecisionsFromWarden(t *testing.T) {
	var backends []router.Backend
	for i := range 2 {
		_, eng := newFake(t, false)
		backends = append(backends, router.Backend{Rank: i, URL: eng.URL, MaxNumSeqs: 32})
	}
	logPath := filepath.Join(t.TempDir(), "decisions.jsonl")
	core, err := router.New(router.Config{Policy: place.PolicySticky, Seed: 1, DecisionLog: logPath, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, backends)
	if err != nil {
		t.Fatal(err)
	}
	w, err := proxy.New(core, proxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(w.Handler())
	defer front.Close()
	cfg := smallConfig(front.URL, 2)
	cfg.Turns = 2
	cfg.TimeScale = 2
	cfg.Variants = []string{place.PolicyOff, place.PolicySticky}
	cfg.Out = t.TempDir()
	res := runBench(t, cfg, true)
	if err := WriteAll(cfg.Out, res); err != nil {
		t.Fatal(err)
	}
	matched, err := JoinDecisions(cfg.Out, logPath, res, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if matched != len(res.Turns) || matched == 0 {
		t.Errorf("%d of %d turns found their line", matched, len(res.Turns))
	}
	rows := readCSV(t, filepath.Join(cfg.Out, FileTurnDecisions))
	turns := readCSV(t, filepath.Join(cfg.Out, FileTurns))
	if len(rows) != len(turns) {
		t.Fatalf("%d joined rows for %d turns", len(rows), len(turns))
	}
	raw, _ := os.ReadFile(logPath)
	checked := map[string]int{}
	for i, row := range rows {
		tr := turns[i]
		if row["session_id"] != tr["session_id"] || row["turn"] != tr["turn"] || row["variant"] != tr["variant"] {
			t.Fatalf("row %d is %v, turns.csv's %v", i, row, tr)
		}
		if tr["error"] != "" {
			continue
		}
		if row["logged"] != "true" || row["policy"] != tr["variant"] || row["replica"] != tr["replica"] || row["status"] != "200" {
			t.Errorf("row %d: %v for turn %v", i, row, tr)
		}
		want := map[string]string{place.PolicyOff: string(place.ReasonOff), place.PolicySticky: string(place.ReasonSticky)}[tr["variant"]]
		if tr["variant"] == place.PolicySticky && tr["turn"] == "1" {
			want = string(place.ReasonNew)
		}
		if row["route"] != want || row["queue_wait_s"] != "0" || row["session_source"] != "claude-code-header" {
			t.Errorf("row %d: route %q (want %q), wait %s, source %s", i, row["route"], want, row["queue_wait_s"], row["session_source"])
		}
		if v, err := strconv.ParseFloat(row["warden_duration_s"], 64); err != nil || v <= 0 {
			t.Errorf("row %d: warden duration %q", i, row["warden_duration_s"])
		}
		if strings.Contains(string(raw), tr["session_id"]+`"`) {
			t.Errorf("the raw session id %s is in the log", tr["session_id"])
		}
		checked[row["route"]]++
	}
	if checked["off"] == 0 || checked["new"] == 0 || checked["sticky"] == 0 {
		t.Errorf("routes of the turns checked: %v, want off, new and sticky", checked)
	}
	t.Logf("%d turns joined, routes %v", matched, checked)
	if err := core.CloseDecisionLog(); err != nil {
		t.Fatal(err)
	}
}

// TestJoinDecisionsReadsRotatedFiles: lines in the rotated files count,
// another client's lines and a cut line are skipped, a turn without a line
// is logged=false, and the warden's times are scaled to simulated seconds.
func TestJoinDecisionsReadsRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.jsonl")
	line := func(id string, replica int, wait float64) string {
		b, _ := json.Marshal(decision.Line{RequestID: id, Policy: "adaptive", Route: "new", Replica: replica,
			WaitS: wait, TTFTS: 0.25, DurationS: 2, Status: 200, Source: "claude-code-header"})
		return string(b) + "\n"
	}
	os.WriteFile(filepath.Join(dir, "d-2030-01-01T00-00-00.000.jsonl"), []byte(line("s1-1", 3, 1.5)+line("other", 0, 0)), 0o644)
	os.WriteFile(path, []byte(`{"request_id":"s1-2","rep`+"\n"+line("s1-a7-1", 1, 0)), 0o644)
	res := &Results{Config: configJSON{TimeScale: 10}, Turns: []TurnRecord{
		{SessionID: "s1", Turn: 1}, {SessionID: "s1", Turn: 2, Error: "HTTP 503"}, {SessionID: "s1", AgentID: "a7", Turn: 1, Subagent: true},
	}}
	matched, err := JoinDecisions(dir, path, res, 0)
	if err != nil || matched != 2 {
		t.Fatalf("matched %d, %v", matched, err)
	}
	rows := readCSV(t, filepath.Join(dir, FileTurnDecisions))
	if r := rows[0]; r["request_id"] != "s1-1" || r["replica"] != "3" || r["queue_wait_s"] != "15" || r["warden_ttfb_s"] != "2.5" || r["warden_duration_s"] != "20" {
		t.Errorf("row 0: %v", r)
	}
	if r := rows[1]; r["logged"] != "false" || r["route"] != "" {
		t.Errorf("row 1 (no line): %v", r)
	}
	if r := rows[2]; r["request_id"] != "s1-a7-1" || r["subagent"] != "true" || r["replica"] != "1" {
		t.Errorf("row 2: %v", r)
	}
	if _, err := JoinDecisions(dir, filepath.Join(dir, "missing.jsonl"), res, 0); err == nil {
		t.Error("a missing log joined")
	}
}
