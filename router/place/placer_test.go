package place

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/place/placetest"
)

// testReplica is an always healthy replica that counts its requests.
type testReplica struct {
	rank int
	fly  atomic.Int64
}

func (r *testReplica) Rank() int { return r.rank }

func (r *testReplica) View(time.Time) ReplicaView {
	return ReplicaView{Rank: r.rank, Healthy: true, InFlight: int(r.fly.Load()), MaxNumSeqs: 32}
}

func (r *testReplica) Sent() { r.fly.Add(1) }

func testPlacer(n int, c PlacerConfig) (*Placer[*testReplica], []*testReplica) {
	if c.Policy == "" {
		c.Policy = PolicySticky
	}
	c.Rand = placetest.FixedRand(0)
	p := NewPlacer[*testReplica](c)
	var reps []*testReplica
	for i := range n {
		reps = append(reps, &testReplica{rank: i})
	}
	p.SetReplicas(reps)
	return p, reps
}

// TestPlacerBurstDoesNotHerd: concurrent first turns each see the in-flight
// increments of the ones decided before them (the decision and the
// increment are one critical section), so a burst spreads evenly instead of
// landing on the replica that looked idlest to all of them.
func TestPlacerBurstDoesNotHerd(t *testing.T) {
	p, reps := testPlacer(4, PlacerConfig{})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if pl := p.Decide(Request{Key: fmt.Sprint("s", i)}); pl.Reason != ReasonNew {
				t.Errorf("first turn placed %+v", pl.Decision)
			}
		}()
	}
	wg.Wait()
	for _, r := range reps {
		if n := r.fly.Load(); n != 10 {
			t.Errorf("replica %d has %d in flight, want 10 each", r.rank, n)
		}
	}
}

// TestPlacerHoldsUntilARequestEnds: a request the policy holds counts among
// the held and asks again when another request ends; it leaves the count
// when placed, or when its client goes away.
func TestPlacerHoldsUntilARequestEnds(t *testing.T) {
	var room atomic.Bool
	p, _ := testPlacer(1, PlacerConfig{Override: func(_ Request, d Decision, _ []ReplicaView, _ SessionView) Decision {
		if !room.Load() {
			return Decision{Rank: -1, Reason: ReasonWait}
		}
		return d
	}})
	room.Store(true)
	first := p.Decide(Request{Key: "a"})
	room.Store(false)
	got := make(chan Placement[*testReplica])
	go func() { got <- p.Place(context.Background(), Request{Key: "b"}) }()
	simproc.Poll(t, "the request to be held", func() bool { return p.Counts(time.Now(), nil).Held == 1 })
	room.Store(true)
	p.End(&first, true, Report{}, -1) // wakes b
	select {
	case pl := <-got:
		if pl.Reason != ReasonNew || pl.Waited <= 0 {
			t.Errorf("b placed %+v after waiting %v, want new after a wait", pl.Decision, pl.Waited)
		}
	case <-time.After(holdRecheck / 2):
		t.Fatal("b was not woken by the end of a")
	}
	if n := p.Counts(time.Now(), nil).Held; n != 0 {
		t.Errorf("held %d after b was placed", n)
	}

	room.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- p.Place(ctx, Request{Key: "c"}) }()
	simproc.Poll(t, "the request to be held", func() bool { return p.Counts(time.Now(), nil).Held == 1 })
	cancel()
	if pl := <-got; pl.Reason != ReasonWait {
		t.Errorf("c gave up with %+v, want the wait decision", pl.Decision)
	}
	if n := p.Counts(time.Now(), nil).Held; n != 0 {
		t.Errorf("held %d after c's client went away", n)
	}
}

// TestPlacerExpiresOnTheTick: Counts reads a session idle past its TTL as
// gone without removing it (a read changes nothing); the tick removes it.
func TestPlacerExpiresOnTheTick(t *testing.T) {
	now := time.Unix(1000, 0)
	p, _ := testPlacer(2, PlacerConfig{SessionTTL: time.Minute, Clock: func() time.Time { return now }})
	p.Decide(Request{Key: "a"})
	p.Decide(Request{Key: "b"})
	now = now.Add(30 * time.Second)
	p.Decide(Request{Key: "b"})
	now = now.Add(45 * time.Second) // a idle 75 s, b 45 s
	inTable := func() (n int) {
		p.Sessions(func(t *Table) { n = t.Len() })
		return n
	}
	c := p.Counts(now, []int{0, 1})
	if c.Sessions != 1 || c.Concurrent != 1 || c.Active[0]+c.Active[1] != 1 || inTable() != 2 {
		t.Errorf("before the tick: counted %d sessions (%d active, %v per rank), table holds %d; want 1 (1, one rank), 2",
			c.Sessions, c.Concurrent, c.Active, inTable())
	}
	p.Tick()
	if n := inTable(); n != 1 {
		t.Errorf("after the tick: table holds %d, want 1", n)
	}
	after := p.Counts(now, []int{0, 1})
	after.LastRefresh = c.LastRefresh // the tick's balancer sample
	if diff := cmp.Diff(c, after); diff != "" {
		t.Errorf("counts after the tick differ from those read before it (-before +after):\n%s", diff)
	}
}

// TestSubagentsNearTheirParent: with SubagentsNear a burst of new subagent
// conversations goes to the parent's home, where its system prompt and
// tools are resident, up to the spill threshold (max_num_seqs/4 = 8 in
// flight); the rest go by load. Without it they all go by load.
func TestSubagentsNearTheirParent(t *testing.T) {
	for _, near := range []bool{true, false} {
		p, _ := testPlacer(4, PlacerConfig{Config: Config{SubagentsNear: near}})
		parent := p.Decide(Request{Key: "root"})
		homed := 0
		for i := range 12 {
			pl := p.Decide(Request{Key: fmt.Sprint("root#agent:", i), Root: "root", Subagent: true})
			if pl.Reason != ReasonNew {
				t.Fatalf("near %v: subagent %d placed %+v", near, i, pl.Decision)
			}
			if pl.Rank == parent.Rank {
				homed++
			}
		}
		// The parent's own request is in flight there: 7 more fit under 8.
		if want := map[bool]int{true: 7, false: 3}[near]; homed != want {
			t.Errorf("near %v: %d of 12 subagents beside the parent, want %d", near, homed, want)
		}
	}
}
