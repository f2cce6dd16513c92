package panel

import (
	"bytes"
	"github.com/lmwarden/warden/router/schema"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWriteSummaryRows(t *testing.T) {
	s := sampleStatus(3)
	s.Sessions = 1 // not overcommitted now
	var b bytes.Buffer
	WriteSummary(&b, s)
	out := b.String()
	// Hand-computed from sampleStatus: replica requests sticky% spills pinned
	// prompt-tok cached-tok hit cached-share sessions; sticky% of replica 0 =
	// 1100 / (1200 requests - 40 new - 0 pinned). The last column is the
	// new turns, summed in the totals (the 241 sessions seen are the head
	// line's, never that column's total).
	want := map[string][]string{
		"0":   {"0", "1200", "94.8%", "17", "0", "10.00M", "8.10M", "81.0%", "80.6%", "40"},
		"1":   {"1", "1237", "94.7%", "18", "2", "10.13M", "8.18M", "80.7%", "80.6%", "41"},
		"2":   {"2", "1274", "94.6%", "19", "4", "10.26M", "8.26M", "80.4%", "80.6%", "42"},
		"all": {"all", "3711", "97.3%", "54", "6", "30.39M", "24.53M", "80.7%", "80.6%", "123"},
	}
	for first, w := range want {
		if diff := cmp.Diff(w, rowFields(out, first)); diff != "" {
			t.Errorf("row %q (-want +got):\n%s\nin:\n%s", first, diff, out)
		}
	}
	for _, sub := range []string{
		"warden summary for Qwen/Qwen3-4B-Instruct-2507: policy sticky, up 1h02m05s, 241 sessions seen",
		"sticky: turns of known sessions (not a first turn, not client-pinned, placed by an affinity policy)",
		"new turns: turns placed as new, each a conversation's first or a request without a session id",
		"(24.00M of 29.77M prompt tokens cached)",
	} {
		if !strings.Contains(out, sub) {
			t.Errorf("summary lacks %q:\n%s", sub, out)
		}
	}
	if strings.Contains(out, "overcommitted") {
		t.Errorf("summary warns of overcommit that never happened:\n%s", out)
	}
}

func TestWriteSummaryPeakOvercommit(t *testing.T) {
	s := sampleStatus(4)
	s.Sessions = 2 // fine at exit, but it was not during the run
	at := time.Date(2026, 3, 14, 10, 5, 12, 0, time.Local)
	s.PeakOvercommit = &schema.OvercommitPeak{At: at, Sessions: 26, MeanContextTokens: 58_100, CapacityTokens: 1_200_000}
	var b bytes.Buffer
	WriteSummary(&b, s)
	got := strings.Join(strings.Fields(b.String()), " ")
	want := "KV cache was overcommitted during the run (worst at 10:05:12): 26 active sessions x 58.1k " +
		"tokens mean context = 1.51M tokens > 1.20M tokens of KV cache on all replicas; " +
		"conversations evict each other's prefixes and are prefilled again. " +
		"Keep at most 20 conversations going at once, or add replicas."
	if !strings.Contains(got, want) {
		t.Errorf("summary lacks\n%s\nin\n%s", want, b.String())
	}
}

func TestWriteSummaryEmpty(t *testing.T) {
	var b bytes.Buffer
	WriteSummary(&b, schema.Status{})
	if f := rowFields(b.String(), "all"); len(f) != 10 || f[1] != "0" || f[2] != "0.0%" {
		t.Errorf("empty summary totals %q:\n%s", f, b.String())
	}
}

func TestWriteWrapped(t *testing.T) {
	var b bytes.Buffer
	writeWrapped(&b, "aaa bbb ccc dddddddddddd e", 7)
	if diff := cmp.Diff("aaa bbb\nccc\ndddddddddddd\ne\n", b.String()); diff != "" {
		t.Error(diff)
	}
}

func TestStickyShareGuards(t *testing.T) {
	for _, c := range []struct {
		r    schema.Replica
		want float64
	}{
		{schema.Replica{}, 0},
		{schema.Replica{Requests: 2, New: 3}, 0},             // counters read at different moments: no underflow
		{schema.Replica{Requests: 10, New: 2, Sticky: 9}, 1}, // capped
		{schema.Replica{Requests: 10, New: 2, Pinned: 2, Sticky: 3}, 0.5},
	} {
		if got := stickyShare(c.r); got != c.want {
			t.Errorf("stickyShare(%+v) = %v, want %v", c.r, got, c.want)
		}
	}
}

// The exit summary shows one sticky figure for the run (issue 45: the all
// row and a line below it disagreed): the all row is Status.StickyShare,
// and a replica's excludes the turns a non-affinity policy placed, as the
// placer's count does (an A/B bench's off half would dilute it).
func TestWriteSummaryOneStickyFigure(t *testing.T) {
	s := schema.Status{Policy: "sticky", StickyShare: 0.9, Replicas: []schema.Replica{
		// 100 requests: 10 first turns, 40 placed with affinity off, 45 of the other 50 sticky
		{Rank: 0, Requests: 100, New: 10, Balanced: 40, Sticky: 45},
	}}
	var b bytes.Buffer
	WriteSummary(&b, s)
	if f := rowFields(b.String(), "0"); len(f) < 3 || f[2] != "90.0%" {
		t.Errorf("replica 0's sticky %q, want 90.0%% (45 of 50 placed with affinity)\n%s", f, b.String())
	}
	if f := rowFields(b.String(), "all"); len(f) < 3 || f[2] != "90.0%" {
		t.Errorf("all row's sticky %q, want the status' 90.0%%\n%s", f, b.String())
	}
	if strings.Contains(b.String(), "sticky share") {
		t.Errorf("a second sticky figure:\n%s", b.String())
	}
}

func TestMissLine(t *testing.T) {
	if got := MissLine(nil); got != "" {
		t.Errorf("no misses: %q", got)
	}
	got := MissLine(map[string]uint64{"evicted": 2500, "new": 7500, "moved": 0})
	if want := "new 7.5k (75.0%), evicted 2.5k (25.0%)"; got != want {
		t.Errorf("MissLine = %q, want %q", got, want)
	}
}
