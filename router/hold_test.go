package router_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/place"
)

// bigChat is a chat body of about n bytes for session key.
func bigChat(key string, n int) string {
	return fmt.Sprintf(`{"model":"m","prompt_cache_key":%q,"messages":[{"role":"user","content":%q}]}`, key, strings.Repeat("w ", n/2))
}

// TestHoldForRoom: on one replica with 40k tokens of KV, a conversation of
// ~26k tokens is in flight; a new one of ~18k does not fit, so the warden
// holds it (it never reaches the engine) until the first ends, then places
// it.
func TestHoldForRoom(t *testing.T) {
	e := newFakeEngine(t)
	e.hold = make(chan struct{})
	p, front := testProxy(t, testConfig{}, e)
	coreOf(p).CheckNow(context.Background()) // learn the KV capacity (2500 blocks x 16)
	doneA := make(chan string, 1)
	send := func(key string, n int, done chan<- string) {
		req, _ := httpRequest(context.Background(), front.URL+"/v1/chat/completions", bigChat(key, n))
		resp, err := front.Client().Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		resp.Body.Close()
		done <- resp.Header.Get(routeHeader)
	}
	go send("a", 120_000, doneA)
	<-e.arrived
	doneB := make(chan string, 1)
	go send("b", 80_000, doneB)
	simproc.Poll(t, "b held at the warden", func() bool { return held(p) == 1 })
	e.mu.Lock()
	n := len(e.bodies)
	e.mu.Unlock()
	if n != 1 {
		t.Fatalf("engine received %d requests while b was held, want 1", n)
	}
	close(e.hold)
	if got := <-doneA; got != string(place.ReasonNew) {
		t.Errorf("a: route %q", got)
	}
	if got := <-doneB; got != string(place.ReasonNew) {
		t.Errorf("b: route %q, want new after the hold", got)
	}
	if n := held(p); n != 0 {
		t.Errorf("held = %d after both ended", n)
	}
}

// TestHeldClientGoesAway: a held request whose client cancels leaves the
// hold (499) without reaching an engine.
func TestHeldClientGoesAway(t *testing.T) {
	e := newFakeEngine(t)
	e.hold = make(chan struct{})
	defer close(e.hold)
	p, front := testProxy(t, testConfig{}, e)
	coreOf(p).CheckNow(context.Background())
	go func() {
		req, _ := httpRequest(context.Background(), front.URL+"/v1/chat/completions", bigChat("a", 120_000))
		if resp, err := front.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-e.arrived
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := httpRequest(ctx, front.URL+"/v1/chat/completions", bigChat("b", 80_000))
		_, err := front.Client().Do(req)
		errc <- err
	}()
	simproc.Poll(t, "b held", func() bool { return held(p) == 1 })
	cancel()
	<-errc
	simproc.Poll(t, "b released", func() bool { return held(p) == 0 })
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) != 1 {
		t.Errorf("engine received %d requests, want 1", len(e.bodies))
	}
}

// held is the number of requests the Placer holds for room now.
func held(p *warden) int { return coreOf(p).Placer().Counts(coreOf(p).Now(), nil).Held }

func httpRequest(ctx context.Context, url, body string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}
