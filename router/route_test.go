package router_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// fakeClock is a settable clock for Config.Clock.
// heldEngines returns n fake engines that hold every completion until the
// returned release function is called.
func heldEngines(t *testing.T, n int) ([]*fakeEngine, func()) {
	hold := make(chan struct{})
	var es []*fakeEngine
	for range n {
		e := newFakeEngine(t)
		e.hold = hold
		es = append(es, e)
	}
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return es, release
}

// sendHeld sends one request in the background, waits until the warden has
// it in flight, and returns a function that waits for its route.
func sendHeld(t *testing.T, p *warden, url, body string, kv ...string) func() (string, string) {
	t.Helper()
	before := coreOf(p).Status().InFlight
	var rank, route string
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, _ := post(t, url+"/v1/chat/completions", body, kv...)
		rank, route = resp.Header.Get(identity.PinHeader), resp.Header.Get(routeHeader)
	}()
	simproc.Poll(t, "request in flight", func() bool { return coreOf(p).Status().InFlight == before+1 })
	return func() (string, string) { <-done; return rank, route }
}

func TestSpillAboveTheThresholdAndNotBelow(t *testing.T) {
	es, release := heldEngines(t, 2)
	p, front := testProxy(t, testConfig{Config: router.Config{SpillThreshold: 2}}, es...)
	var results []func() (string, string)
	for range 5 {
		results = append(results, sendHeld(t, p, front.URL, chatBody("one-conversation", false, "")))
	}
	release()
	var got []string
	home := ""
	for i, r := range results {
		rank, route := r()
		if i == 0 {
			home = rank
		}
		where := "home"
		if rank != home {
			where = "other"
		}
		got = append(got, route+"@"+where)
	}
	// In flight at home before each: 0, 1, 2 (= threshold, stays), 3 (> 2, spills), 3 (spills).
	want := "[new@home sticky@home sticky@home spill@other spill@other]"
	if fmt.Sprint(got) != want {
		t.Errorf("routes %v, want %s", got, want)
	}
	settled(t, p)
	if st := coreOf(p).Status(); st.Totals.SpilledIn != 2 || st.Sessions != 1 {
		t.Errorf("spilled %d sessions %d", st.Totals.SpilledIn, st.Sessions)
	}
}

func TestOffSpreadsByQueueLikeVLLM(t *testing.T) {
	es, release := heldEngines(t, 4)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicyOff, Clock: clk.now}}, es...)
	var results []func() (string, string)
	// Within one stats period, each request sent counts as waiting (score
	// +4) on its engine: the same conversation goes round the replicas.
	for range 8 {
		results = append(results, sendHeld(t, p, front.URL, chatBody("same", false, "")))
	}
	clk.add(time.Second) // stats refresh: 2 running everywhere, a tie again
	results = append(results, sendHeld(t, p, front.URL, chatBody("same", false, "")))
	release()
	var got []string
	for _, r := range results {
		rank, route := r()
		got = append(got, rank+route)
	}
	want := "[0off 1off 2off 3off 0off 1off 2off 3off 0off]"
	if fmt.Sprint(got) != want {
		t.Errorf("routes %v, want %s (ties to the lowest rank)", got, want)
	}
}

func TestLeastInFlightAndHashPolicies(t *testing.T) {
	es, release := heldEngines(t, 2)
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicyLeastInFlight}}, es...)
	a := sendHeld(t, p, front.URL, chatBody("x", false, ""))
	b := sendHeld(t, p, front.URL, chatBody("x", false, ""))
	release()
	ra, _ := a()
	rb, _ := b()
	if ra == rb {
		t.Errorf("least-inflight put two concurrent requests on replica %s", ra)
	}
	if _, err := coreOf(p).SetPolicy(place.PolicyHash); err != nil {
		t.Fatal(err)
	}
	first, _ := post(t, front.URL+"/v1/chat/completions", chatBody("h", false, ""))
	for range 3 {
		resp, _ := post(t, front.URL+"/v1/chat/completions", chatBody("h", false, ""))
		if resp.Header.Get(identity.PinHeader) != first.Header.Get(identity.PinHeader) || resp.Header.Get(routeHeader) != "hash" {
			t.Errorf("hash moved the session: %s (%s)", resp.Header.Get(identity.PinHeader), resp.Header.Get(routeHeader))
		}
	}
}

func TestSessionTTLOnTheInjectedClock(t *testing.T) {
	e0, e1 := newFakeEngine(t), newFakeEngine(t)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	p, front := testProxy(t, testConfig{Config: router.Config{Clock: clk.now, SessionTTL: time.Minute}}, e0, e1)
	post(t, front.URL+"/v1/chat/completions", chatBody("ttl", false, ""))
	clk.add(59 * time.Second)
	resp, _ := post(t, front.URL+"/v1/chat/completions", chatBody("ttl", false, ""))
	if resp.Header.Get(routeHeader) != "sticky" {
		t.Errorf("within the TTL: route %s", resp.Header.Get(routeHeader))
	}
	clk.add(61 * time.Second)
	if n := coreOf(p).Status().Sessions; n != 0 {
		t.Errorf("sessions after the TTL = %d, want 0", n)
	}
	resp, _ = post(t, front.URL+"/v1/chat/completions", chatBody("ttl", false, ""))
	if resp.Header.Get(routeHeader) != "new" {
		t.Errorf("after the TTL: route %s, want new", resp.Header.Get(routeHeader))
	}
}
