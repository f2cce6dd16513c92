package router

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/router/schema"
	"github.com/lmwarden/warden/router/tap"
)

// TestSeriesBuckets: finished requests' usage lands in 10 s buckets (cached
// at most the prompt, the rest computed); the points run from the first
// non-empty bucket to the one holding now, empty ones as zeros, and buckets
// older than the window are not shown.
func TestSeriesBuckets(t *testing.T) {
	s := newSeries(10*time.Second, time.Minute)
	t0 := time.Unix(1_000_000, 0)
	s.add(t0.Add(1*time.Second), tap.Usage{Known: true, Prompt: 100, Cached: 60, Completion: 5})
	s.add(t0.Add(9*time.Second), tap.Usage{Known: true, Prompt: 10, Cached: 0, Completion: 1})
	s.add(t0.Add(25*time.Second), tap.Usage{Known: true, Prompt: 50, Cached: 50, Completion: 2})
	point := func(at time.Duration, cached, computed, completion uint64) schema.Point {
		return schema.Point{T: t0.Add(at).UTC(), Seconds: 10, CachedTokens: cached, ComputedTokens: computed, CompletionTokens: completion}
	}
	want := []schema.Point{
		point(0, 60, 50, 6),
		point(10*time.Second, 0, 0, 0),
		point(20*time.Second, 50, 0, 2),
		point(30*time.Second, 0, 0, 0),
	}
	if diff := cmp.Diff(want, s.points(t0.Add(30*time.Second))); diff != "" {
		t.Errorf("points (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]schema.Point(nil), s.points(t0.Add(2*time.Hour))); diff != "" {
		t.Errorf("two hours later, old buckets still shown (-want +got):\n%s", diff)
	}
}
