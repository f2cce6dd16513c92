package panel

import (
	"bytes"
	"github.com/lmwarden/warden/router/schema"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// rowFields returns the whitespace-separated fields of the first line of
// out whose first field is first, or nil.
func rowFields(out, first string) []string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

func TestFormatStatusTableRows(t *testing.T) {
	var b bytes.Buffer
	formatStatusTable(&b, sampleStatus(3))
	out := b.String()
	// Expected cells written out by hand from sampleStatus, column by column:
	// rank gpu port up infl sticky spill pin run wait kv kv-cap hit sess rst.
	want := map[string][]string{
		"rank": {"rank", "gpu", "port", "up", "infl", "sticky", "spill", "pin", "run", "wait", "kv", "kv", "cap", "hit", "sess", "rst"},
		"0":    {"0", "0", "8101", "up", "3", "1100", "17", "0", "3", "0", "41.2%", "41.9k", "81.0%", "2", "0"},
		"1":    {"1", "1", "8102", "up", "4", "1131", "18", "2", "4", "1", "47.3%", "42.0k", "80.7%", "3", "1"},
		"2":    {"2", "2", "8103", "starting", "5", "1162", "19", "4", "5", "2", "53.4%", "42.0k", "80.4%", "4", "0"},
		// kv: capacity-weighted mean fill; hit: all hits / all queries.
		"all": {"all", "2/3", "12", "3393", "54", "6", "12", "3", "47.3%", "125.9k", "80.7%", "9", "1"},
	}
	for first, w := range want {
		if diff := cmp.Diff(w, rowFields(out, first)); diff != "" {
			t.Errorf("row %q (-want +got):\n%s\nin:\n%s", first, diff, out)
		}
	}
	for _, sub := range []string{
		"warden serving Qwen/Qwen3-4B-Instruct-2507, 3 replicas",
		"policy sticky | affinity on | spill threshold 8 (auto) | sticky 97.3% | in flight 12 | sessions 13",
		"counters since ", "(warden start, up 1h02m05s)",
		"! replica 2 metrics: dial tcp 127.0.0.1:8103: connect: connection refused",
	} {
		if !strings.Contains(out, sub) {
			t.Errorf("output lacks %q:\n%s", sub, out)
		}
	}
}

// TestSessionsBadgeIsTheTablesTotal: the sessions badge counts what the
// table's sess column totals (a turn within the active window); the
// remembered ones are named as such.
func TestSessionsBadgeIsTheTablesTotal(t *testing.T) {
	s := sampleStatus(3) // replicas' active sessions: 2, 3, 4
	s.ActiveWindowSeconds, s.ConcurrentSessions, s.Sessions = 30, 9, 13
	var b bytes.Buffer
	formatStatusTable(&b, s)
	out := b.String()
	if f := rowFields(out, "all"); len(f) < 12 || f[11] != "9" {
		t.Errorf("totals' sess cell: %q, want 9\n%s", f, out)
	}
	if !strings.Contains(out, "| sessions 9 (13 remembered)") {
		t.Errorf("badge line does not count the table's 9 active sessions:\n%s", out)
	}
	s.Sessions = 9
	b.Reset()
	formatStatusTable(&b, s)
	if !strings.Contains(b.String(), "| sessions 9\n") && !strings.Contains(b.String(), "| sessions 9 |") {
		t.Errorf("badge line with nothing more remembered:\n%s", b.String())
	}
}

func TestFormatStatusTableShowsSubagents(t *testing.T) {
	s := sampleStatus(3)
	s.Replicas[1].ActiveSubagents, s.Replicas[2].ActiveSubagents = 2, 1
	s.SubagentSessions = 3
	var b bytes.Buffer
	formatStatusTable(&b, s)
	out := b.String()
	if f := rowFields(out, "1"); len(f) < 15 || f[13] != "3" || f[14] != "(2)" {
		t.Errorf("replica 1's sess cell: %q, want 3 (2)\n%s", f, out)
	}
	if f := rowFields(out, "all"); len(f) < 13 || f[11] != "9" || f[12] != "(3)" {
		t.Errorf("totals' sess cell: %q, want 9 (3)\n%s", f, out)
	}
	if !strings.Contains(out, "| sessions 13 | subagents 3") {
		t.Errorf("badge line lacks the subagents:\n%s", out)
	}
	if f := rowFields(out, "0"); len(f) != 15 || f[13] != "2" {
		t.Errorf("replica 0 without subagents: %q, want a plain 2", f)
	}
}

func TestFormatStatusTableBadgesAndWarnings(t *testing.T) {
	s := sampleStatus(2)
	s.Sessions = 1 // not overcommitted now: the peak is shown
	s.Policy, s.Affinity, s.SpillThreshold, s.SpillAuto = "off", false, 5, false
	s.Warnings = []string{"KV cache overcommitted: test"}
	s.PeakOvercommit = &schema.OvercommitPeak{At: time.Date(2026, 3, 14, 10, 5, 12, 0, time.Local), Sessions: 26, WindowSeconds: 300, MeanContextTokens: 58_100, CapacityTokens: 1_200_000}
	var b bytes.Buffer
	formatStatusTable(&b, s)
	out := b.String()
	if !strings.Contains(out, "policy off | affinity off | spill threshold 5 | sticky") {
		t.Errorf("badges wrong:\n%s", out)
	}
	if strings.Contains(out, "(auto)") {
		t.Errorf("a set threshold is shown as auto:\n%s", out)
	}
	if !strings.Contains(out, "! KV cache overcommitted: test\n") {
		t.Errorf("warning missing:\n%s", out)
	}
	if want := "! KV cache overcommitted earlier (worst at 10:05:12): 26 sessions with a turn in the last 5m00s x 58.1k = 1.51M > 1.20M tokens"; !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
		t.Errorf("peak overcommit missing: want %q in\n%s", want, out)
	}
	s.Sessions = 13 // overcommitted now: the live warning says it, the peak is not repeated
	b.Reset()
	formatStatusTable(&b, s)
	if strings.Contains(b.String(), "overcommitted earlier") {
		t.Errorf("peak repeated while overcommitted now:\n%s", b.String())
	}
}

func TestFormatStatusTableFits100Columns(t *testing.T) {
	s := sampleStatus(8)
	for i := range s.Replicas { // six-digit counters, a tp=2 GPU group
		s.Replicas[i].Sticky += 900_000
		s.Replicas[i].GPUs = []string{"14", "15"}
	}
	for _, f := range []func(*bytes.Buffer){
		func(b *bytes.Buffer) { formatStatusTable(b, s) },
		func(b *bytes.Buffer) { WriteSummary(b, s) },
	} {
		var b bytes.Buffer
		f(&b)
		for _, l := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(l); n > 100 {
				t.Errorf("line of %d columns: %q", n, l)
			}
		}
	}
}

func TestFormatStatusTableEmpty(t *testing.T) {
	var b bytes.Buffer
	formatStatusTable(&b, schema.Status{})
	if got := rowFields(b.String(), "all"); len(got) == 0 || got[1] != "0/0" {
		t.Errorf("empty status: totals row %q in:\n%s", got, b.String())
	}
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{fmtTokens(0), "0"}, {fmtTokens(999), "999"}, {fmtTokens(999.5), "1.0k"},
		{fmtTokens(41936), "41.9k"}, {fmtTokens(999949), "999.9k"}, {fmtTokens(999950), "1.00M"},
		{fmtTokens(1_510_000), "1.51M"}, {fmtPct(0), "0.0%"}, {fmtPct(0.8642), "86.4%"}, {fmtPct(1), "100.0%"},
		{fmtNum(3), "3"}, {fmtNum(2.5), "2.5"}, {fmtGPUs(nil), "-"}, {fmtGPUs([]string{"0", "1"}), "0,1"},
		{fmtUp(schema.Replica{Up: true, State: "ready"}), "up"}, {fmtUp(schema.Replica{State: "failed"}), "failed"}, {fmtUp(schema.Replica{}), "down"},
		{fmtDuration(12e9), "12s"}, {fmtDuration(245e9), "4m05s"}, {fmtDuration(3723e9), "1h02m03s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestFormatStatusTableShowsContextAndTools(t *testing.T) {
	s := sampleStatus(2)
	s.MaxModelLen = 38000
	s.Engines = &schema.EngineSetup{AutoToolChoice: true, ToolCallParser: "hermes"}
	var b bytes.Buffer
	formatStatusTable(&b, s)
	if !strings.Contains(b.String(), ", context 38000 tokens, tools hermes\n") {
		t.Errorf("header:\n%s", b.String())
	}
	s.Engines = &schema.EngineSetup{}
	b.Reset()
	formatStatusTable(&b, s)
	if !strings.Contains(b.String(), ", TOOLS OFF\n") {
		t.Errorf("tools off not shown:\n%s", b.String())
	}
	s.Engines, s.MaxModelLen = nil, 0 // warden route, nothing learned yet
	b.Reset()
	formatStatusTable(&b, s)
	if strings.Contains(b.String(), "context") || strings.Contains(b.String(), "tools") {
		t.Errorf("route: %s", b.String())
	}
}
