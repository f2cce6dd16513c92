package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/place"
)

// TestOffSeesTheLoadOfTheLastTick checks the vLLM-style balancer's view is
// the sample of the last periodic refresh plus what was sent since, not the
// exact load at the decision: a closed-loop session whose turn just ended
// still counts on its replica until the next tick, so `off` does not send
// its next turn home by accident. Without the tick (tests, no Run loop) the
// view is refreshed at the decision once it is older than the interval.
func TestOffSeesTheLoadOfTheLastTick(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ticking bool
		want    int
	}{
		{"with Run's tick the finished turn still counts: next turn goes to replica 1", true, 1},
		{"refreshed at the decision both look idle: the tie goes to the scan start, 0", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_000_000, 0)}
			var bs []Backend
			for i := range 2 {
				bs = append(bs, Backend{Rank: i, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), MaxNumSeqs: 32})
			}
			p, _ := testProxyBackends(t, Config{Policy: place.PolicyOff, Clock: clk.now, BalancerInterval: 100 * time.Millisecond}, bs)
			if tc.ticking { // Run's tick, which never fires on its own here: the test ticks
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go p.placer.TickBalancers(ctx, time.Hour)
				simproc.Poll(t, "the tick to start", func() bool { return p.placer.Counts(clk.now(), nil).Ticking })
			}

			first := p.placer.Decide(place.Request{Key: "a"})
			if first.Rank != 0 {
				t.Fatalf("first turn on an idle pair went to %d, want 0 (the scan starts at 0)", first.Rank)
			}
			// Another conversation's short turn: replica 0 is busy, so 1; it
			// ends before the tick. Two routed requests put vLLM's rotating
			// scan start back at 0.
			other := p.placer.Decide(place.Request{Key: "b"})
			if other.Rank != 1 {
				t.Fatalf("the other turn went to %d, want 1", other.Rank)
			}
			other.Replica.inflight.Add(-1)
			p.placer.RefreshBalancers()    // a tick while the first turn runs: 0 busy, 1 idle
			first.Replica.inflight.Add(-1) // the turn ends
			clk.add(time.Second)           // long past the interval, but no tick since
			second := p.placer.Decide(place.Request{Key: "a"})
			if second.Rank != tc.want {
				t.Errorf("second turn went to replica %d, want %d", second.Rank, tc.want)
			}
		})
	}
}

// TestRunTicksTheBalancer checks Run takes over the refresh and hands it
// back when it ends.
func TestRunTicksTheBalancer(t *testing.T) {
	p, _ := testProxyBackends(t, Config{Policy: place.PolicyOff, BalancerInterval: time.Millisecond},
		[]Backend{{Rank: 0, URL: "http://127.0.0.1:9", MaxNumSeqs: 32}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	simproc.Poll(t, "Run to tick the balancer", func() bool {
		c := p.placer.Counts(p.clock(), nil)
		return c.Ticking && !c.LastRefresh.IsZero()
	})
	cancel()
	<-done
	simproc.Poll(t, "the tick to stop", func() bool { return !p.placer.Counts(p.clock(), nil).Ticking })
}
