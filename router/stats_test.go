package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/warden/router/tap"
)

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
