package proxy

import (
	"context"
	"testing"

	"github.com/lmwarden/warden/proxy/identity"
	"github.com/lmwarden/warden/proxy/place"
)

// residentOn is where the adaptive memory believes key's prefix is (-1
// nowhere), on a snapshot taken as place takes it.
func residentOn(p *Proxy, key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var snap []place.ReplicaView
	for _, r := range p.replicaList() {
		snap = append(snap, r.view(p.sessions.Active(r.rank)))
	}
	sv := place.SessionView{Key: key}
	p.route.ViewSession(&sv, 0, snap)
	return sv.ResidentOn
}

// TestCacheWipesForgotten: after the engine's prefix cache is emptied — a
// restart the launcher reports, counters that went down (a restart nobody
// reported), or POST /warden/reset_prefix_cache — the conversations homed
// there are no longer sent back as if their prefix were resident: their
// next turn is placed by load ("new"), and the adaptive memory no longer
// believes the prefix is there.
func TestCacheWipesForgotten(t *testing.T) {
	for _, tc := range []struct {
		name string
		wipe func(t *testing.T, p *Proxy, front string, e *fakeEngine, rank int)
	}{
		{"launcher restart", func(t *testing.T, p *Proxy, _ string, _ *fakeEngine, rank int) { p.NoteRestart(rank) }},
		{"counters went down", func(t *testing.T, p *Proxy, _ string, e *fakeEngine, rank int) {
			r := p.lookup(rank)
			e.metrics.Store(metricsText(0, 0, 0.1, 5000, 4000))
			p.check(context.Background(), r) // the baseline
			e.metrics.Store(metricsText(0, 0, 0.1, 10, 0))
			p.check(context.Background(), r) // lower: the engine restarted
		}},
		{"reset_prefix_cache", func(t *testing.T, _ *Proxy, front string, _ *fakeEngine, _ int) {
			if resp, body := post(t, front+"/warden/reset_prefix_cache", ""); resp.StatusCode != 200 {
				t.Fatalf("reset: %d %s", resp.StatusCode, body)
			}
		}},
	} {
		for _, policy := range []string{"sticky", "adaptive"} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				engines := []*fakeEngine{newFakeEngine(t), newFakeEngine(t)}
				p, front := testProxy(t, Config{Policy: policy}, engines...)
				for _, r := range p.replicaList() {
					p.check(context.Background(), r) // KV capacities known
				}
				turn := func() (rank, route string) {
					t.Helper()
					resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("conv", false, ""))
					if resp.StatusCode != 200 {
						t.Fatalf("%d %s", resp.StatusCode, body)
					}
					settled(t, p)
					return resp.Header.Get(identity.PinHeader), resp.Header.Get(routeHeader)
				}
				home, route := turn()
				if route != "new" {
					t.Fatalf("first turn: route %s", route)
				}
				if _, route = turn(); route != "sticky" {
					t.Fatalf("second turn: route %s, want sticky", route)
				}
				rank := int(home[0] - '0')
				resident := residentOn(p, "conv")
				if policy == "adaptive" && resident != rank {
					t.Fatalf("before the wipe the memory puts the prefix on %d, want %d", resident, rank)
				}
				tc.wipe(t, p, front.URL, engines[rank], rank)
				if resident = residentOn(p, "conv"); resident != -1 {
					t.Errorf("after the wipe the memory still puts the prefix on %d", resident)
				}
				if _, route = turn(); route != "new" {
					t.Errorf("turn after the wipe: route %s, want new (placed by load)", route)
				}
				if _, route = turn(); route != "sticky" {
					t.Errorf("the turn after that: route %s, want sticky on its new home", route)
				}
			})
		}
	}
}
