package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/warden/proxy/tap"
)

func TestSessionTableExpiresIdleSessions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tab := newSessionTable(time.Minute, 0)
	tab.insert("a", 0, t0)
	tab.insert("b", 1, t0.Add(30*time.Second))
	if tab.get("a", t0.Add(59*time.Second)) == nil {
		t.Fatal("a expired before its TTL")
	}
	// a was touched at 59 s; b was last seen at 30 s.
	if tab.get("b", t0.Add(91*time.Second)) != nil {
		t.Error("b outlived its TTL")
	}
	if tab.get("a", t0.Add(118*time.Second)) == nil {
		t.Error("a expired although touched")
	}
	if tab.active[1] != 0 || tab.active[0] != 1 || tab.len() != 1 {
		t.Errorf("active %v len %d", tab.active, tab.len())
	}
}

func TestSessionTableEvictsLeastRecentlyUsed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tab := newSessionTable(0, 3)
	for i, k := range []string{"a", "b", "c"} {
		tab.insert(k, i, t0)
	}
	tab.get("a", t0) // a is now the most recent
	tab.insert("d", 0, t0)
	if tab.peek("b") != nil || tab.peek("a") == nil || tab.len() != 3 {
		t.Errorf("after eviction: b=%v a=%v len=%d", tab.peek("b"), tab.peek("a"), tab.len())
	}
	if tab.active[1] != 0 || tab.seen != 4 {
		t.Errorf("active %v seen %d", tab.active, tab.seen)
	}
}

func TestSessionTableContextSums(t *testing.T) {
	tab := newSessionTable(time.Minute, 0)
	t0 := time.Unix(1000, 0)
	a, b := tab.insert("a", 0, t0), tab.insert("b", 0, t0)
	tab.setContext(a, 1000)
	tab.setContext(b, 3000)
	tab.setContext(a, 2000)
	if tab.ctxSum != 5000 || tab.ctxN != 2 {
		t.Errorf("sum %d n %d, want 5000 2", tab.ctxSum, tab.ctxN)
	}
	tab.rehome(b, 1)
	tab.expire(t0.Add(2 * time.Minute))
	if tab.ctxSum != 0 || tab.ctxN != 0 || tab.active[0] != 0 || tab.active[1] != 0 {
		t.Errorf("after expiry: sum %d n %d active %v", tab.ctxSum, tab.ctxN, tab.active)
	}
}

func TestSeriesBuckets(t *testing.T) {
	s := newSeries(10*time.Second, time.Minute)
	t0 := time.Unix(1_000_000, 0)
	s.add(t0.Add(1*time.Second), tap.Usage{Known: true, Prompt: 100, Cached: 60, Completion: 5})
	s.add(t0.Add(9*time.Second), tap.Usage{Known: true, Prompt: 10, Cached: 0, Completion: 1})
	s.add(t0.Add(25*time.Second), tap.Usage{Known: true, Prompt: 50, Cached: 50, Completion: 2})
	pts := s.points(t0.Add(30 * time.Second))
	got := fmt.Sprint(len(pts), pts[0].CachedTokens, pts[0].ComputedTokens, pts[0].CompletionTokens,
		pts[1].CachedTokens, pts[2].CachedTokens, pts[3].CachedTokens)
	if got != "4 60 50 6 0 50 0" {
		t.Errorf("points = %s, want 4 buckets: 60 50 6 | 0 | 50 | 0", got)
	}
	if pts := s.points(t0.Add(2 * time.Hour)); len(pts) != 0 {
		t.Errorf("old buckets still shown: %d", len(pts))
	}
}
