package router

import (
	"sync"
	"time"

	"github.com/lmwarden/warden/router/schema"
	"github.com/lmwarden/warden/router/tap"
)

// series is the token time series for the chart: fixed-width buckets of
// finished requests' usage over a bounded window (a ring).
type series struct {
	mu      sync.Mutex
	width   time.Duration
	buckets []bucket
}

type bucket struct {
	start                      int64 // unix nanoseconds, multiple of width; 0 = empty
	cached, computed, complete uint64
}

func newSeries(width, window time.Duration) *series {
	return &series{width: width, buckets: make([]bucket, int(window/width))}
}

// add records one finished request's usage at time t.
func (s *series) add(t time.Time, u tap.Usage) {
	start := t.UnixNano() - t.UnixNano()%int64(s.width)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &s.buckets[(start/int64(s.width))%int64(len(s.buckets))]
	if b.start != start {
		*b = bucket{start: start}
	}
	cached := min(u.Cached, u.Prompt)
	b.cached += cached
	b.computed += u.Prompt - cached
	b.complete += u.Completion
}

// points returns the buckets of the window ending at now, oldest first,
// from the first non-empty one on (empty buckets in between are zeros).
func (s *series) points(now time.Time) []schema.Point {
	w := int64(s.width)
	end := now.UnixNano() - now.UnixNano()%w
	n := int64(len(s.buckets))
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []schema.Point
	for k := n - 1; k >= 0; k-- {
		start := end - k*w
		b := s.buckets[(start/w)%n]
		if b.start != start {
			if out == nil {
				continue
			}
			b = bucket{start: start}
		}
		out = append(out, schema.Point{T: time.Unix(0, start).UTC(), Seconds: s.width.Seconds(),
			CachedTokens: b.cached, ComputedTokens: b.computed, CompletionTokens: b.complete})
	}
	return out
}
