package panel

import (
	"github.com/lmwarden/warden/router/schema"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// loadStatus is a status with n active sessions of mean context ctx on
// replicas of the given KV capacities.
func loadStatus(n, ctx int, now time.Time, caps ...int) schema.Status {
	s := schema.Status{Now: now, Sessions: n, ActiveContextSessions: n, ActiveContextTokens: uint64(n * ctx)}
	for i, c := range caps {
		s.Replicas = append(s.Replicas, schema.Replica{Rank: i, KVCapacityTokens: c})
	}
	return s
}

func TestOvercommit(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		s    schema.Status
		over bool
		msg  string
	}{
		{name: "the field case: 26 sessions of 58k on 7 cards of ~40k", s: loadStatus(26, 58_000, t0, 40_000, 40_000, 40_000, 40_000, 40_000, 40_000, 40_000),
			over: true, msg: "KV cache overcommitted: 26 active sessions x 58.0k tokens mean context = 1.51M tokens > 280.0k tokens"},
		{name: "fits exactly", s: loadStatus(2, 40_000, t0, 40_000, 40_000)},
		{name: "one token over", s: loadStatus(2, 40_001, t0, 40_000, 40_000), over: true, msg: "Keep at most 1 conversations going at once"},
		{name: "capacity unknown", s: loadStatus(30, 58_000, t0, 0, 0)},
		{name: "no sessions", s: loadStatus(0, 0, t0, 40_000)},
		{name: "context unknown", s: schema.Status{Sessions: 30, Replicas: []schema.Replica{{KVCapacityTokens: 40_000}}}},
	} {
		msg, over := Overcommit(c.s)
		if over != c.over || !strings.Contains(msg, c.msg) || (!over && msg != "") {
			t.Errorf("%s: got (%q, %v), want over=%v and a message with %q", c.name, msg, over, c.over, c.msg)
		}
	}
}

func TestOvercommitUsesTotalsCapacity(t *testing.T) {
	s := loadStatus(4, 30_000, time.Time{}) // no rows with capacity
	s.Totals.KVCapacityTokens = 100_000
	if _, over := Overcommit(s); !over {
		t.Error("4 x 30k over 100k of Totals capacity not reported")
	}
}

func TestUpdatePeakKeepsTheWorst(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	caps := []int{40_000, 40_000}
	var p *schema.OvercommitPeak
	p = UpdatePeak(p, loadStatus(1, 10_000, t0, caps...)) // fits
	if p != nil {
		t.Fatalf("peak %+v from a load that fits", p)
	}
	p = UpdatePeak(p, loadStatus(3, 30_000, t0.Add(time.Minute), caps...))   // 90k > 80k
	p = UpdatePeak(p, loadStatus(5, 30_000, t0.Add(2*time.Minute), caps...)) // 150k: worst
	p = UpdatePeak(p, loadStatus(4, 30_000, t0.Add(3*time.Minute), caps...)) // 120k
	p = UpdatePeak(p, loadStatus(1, 30_000, t0.Add(4*time.Minute), caps...)) // fits again
	want := &schema.OvercommitPeak{At: t0.Add(2 * time.Minute), Sessions: 5, MeanContextTokens: 30_000, CapacityTokens: 80_000}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("peak (-want +got):\n%s", diff)
	}
}

func TestOvercommitPrefersConcurrentSessions(t *testing.T) {
	s := loadStatus(40, 30_000, time.Time{}, 100_000) // 40 in the table, most of them idle
	s.ConcurrentSessions = 3                          // 3 x 30k = 90k fits
	if msg, over := Overcommit(s); over {
		t.Errorf("idle sessions counted: %s", msg)
	}
	s.ConcurrentSessions = 4 // 120k does not
	if msg, _ := Overcommit(s); !strings.Contains(msg, ": 4 active sessions x 30.0k") {
		t.Errorf("got %q", msg)
	}
}

// The warning says what its number counts: after a bench of two sessions
// at a time, the sessions with a turn in the active window include those
// that finished (issue 45: "11 active sessions ... run at most 9
// concurrent sessions" read as if 11 ran at once).
func TestOvercommitSaysWhatItCounts(t *testing.T) {
	s := loadStatus(40, 10_000, time.Time{}, 45_000, 45_000)
	s.ConcurrentSessions, s.ActiveWindowSeconds = 11, 300
	msg, over := Overcommit(s)
	want := "KV cache overcommitted: 11 sessions with a turn in the last 5m00s x 10.0k tokens mean context"
	if !over || !strings.Contains(msg, want) || !strings.Contains(msg, "Keep at most 9 conversations going at once") {
		t.Errorf("got %q, want it to contain %q and the 9 that fit", msg, want)
	}
	p := UpdatePeak(nil, s)
	if p == nil || p.WindowSeconds != 300 || !strings.Contains(peakLine(*p), "11 sessions with a turn in the last 5m00s x 10.0k") {
		t.Errorf("peak %+v does not keep the window: %q", p, peakLine(*p))
	}
}

// TestOvercommitNamesTheHostTier: where the engines could have a host KV
// tier and run without one, the warning (live and at exit) names it as a
// remedy; otherwise it ends with the replicas.
func TestOvercommitNamesTheHostTier(t *testing.T) {
	s := loadStatus(30, 12_000, time.Time{}, 38_000, 38_000)
	msg, _ := Overcommit(s)
	if !strings.HasSuffix(msg, "or add replicas.") {
		t.Errorf("no hint: %q", msg)
	}
	s.Engines = &schema.EngineSetup{OffloadHint: "Or keep evicted prefixes in host RAM: --kv-offload auto."}
	msg, _ = Overcommit(s)
	if !strings.HasSuffix(msg, "or add replicas. Or keep evicted prefixes in host RAM: --kv-offload auto.") {
		t.Errorf("with a hint: %q", msg)
	}
	if p := UpdatePeak(nil, s); p == nil || !strings.Contains(peakMessage(*p, "was"), "--kv-offload auto") {
		t.Errorf("the peak kept for the exit summary lost the hint: %+v", p)
	}
}
