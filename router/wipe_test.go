package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
)

// residentOn is where the adaptive memory believes key's prefix is (-1
// nowhere), on a snapshot taken as a decision takes it.
func residentOn(p *warden, key string) int { return coreOf(p).Placer().ResidentOn(key) }

// TestCacheWipesForgotten: after the engine's prefix cache is emptied — a
// restart the launcher reports, counters that went down (a restart nobody
// reported), or POST /warden/reset_prefix_cache — the conversations homed
// there are no longer sent back as if their prefix were resident: their
// next turn is placed by load ("new"), and the adaptive memory no longer
// believes the prefix is there.
func TestCacheWipesForgotten(t *testing.T) {
	for _, tc := range []struct {
		name string
		wipe func(t *testing.T, p *warden, front string, e *fakeEngine, rank int)
	}{
		{"launcher restart", func(t *testing.T, p *warden, _ string, _ *fakeEngine, rank int) { coreOf(p).NoteRestart(rank) }},
		{"counters went down", func(t *testing.T, p *warden, _ string, e *fakeEngine, rank int) {
			r := coreOf(p).Lookup(rank)
			e.metrics.Store(metricsText(0, 0, 0.1, 5000, 4000))
			coreOf(p).CheckReplica(context.Background(), r.Rank()) // the baseline
			e.metrics.Store(metricsText(0, 0, 0.1, 10, 0))
			coreOf(p).CheckReplica(context.Background(), r.Rank()) // lower: the engine restarted
		}},
		{"reset_prefix_cache", func(t *testing.T, _ *warden, front string, _ *fakeEngine, _ int) {
			if resp, body := post(t, front+"/warden/reset_prefix_cache", ""); resp.StatusCode != 200 {
				t.Fatalf("reset: %d %s", resp.StatusCode, body)
			}
		}},
	} {
		for _, policy := range []string{"sticky", "adaptive"} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				engines := []*fakeEngine{newFakeEngine(t), newFakeEngine(t)}
				p, front := testProxy(t, testConfig{Config: router.Config{Policy: policy}}, engines...)
				for _, r := range coreOf(p).Replicas() {
					coreOf(p).CheckReplica(context.Background(), r.Rank()) // KV capacities known
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

// TestActiveMeansActive: after a 4-at-a-time run of 51 conversations, the
// table still holds all 51 (until their TTL), but only the ones that had a
// turn within the active window count as active — per replica and in the
// KV overcommit warning, which the 51 would trip and the 4 do not.
func TestActiveMeansActive(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	engines := []*fakeEngine{newFakeEngine(t), newFakeEngine(t)}
	small := strings.Replace(metricsText(0, 0, 0.1, 100, 50), `num_gpu_blocks="2500"`, `num_gpu_blocks="30"`, 1) // 480 tokens each
	for _, e := range engines {
		e.metrics.Store(small)
	}
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: "sticky", Clock: clk.now}}, engines...)
	for _, r := range coreOf(p).Replicas() {
		coreOf(p).CheckReplica(context.Background(), r.Rank())
	}
	for g := 0; g < 51; g += 4 { // groups of 4 concurrent conversations, 3 turns 20 s apart
		for turn := range 3 {
			for k := g; k < min(g+4, 51); k++ {
				if resp, body := post(t, front.URL+"/v1/chat/completions", chatBody(fmt.Sprint("conv-", k), false, "")); resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
			}
			settled(t, p)
			if turn < 2 {
				clk.add(20 * time.Second)
			}
		}
		clk.add(time.Second)
	}
	st := coreOf(p).Status()
	if st.Sessions != 51 {
		t.Fatalf("table holds %d sessions, want 51", st.Sessions)
	}
	active := 0
	for _, r := range st.Replicas {
		active += r.ActiveSessions
	}
	if st.ConcurrentSessions < 3 || st.ConcurrentSessions > 8 || active != st.ConcurrentSessions {
		t.Errorf("active: %d (replicas say %d), want the last group's 3 (at most 8); window %.0f s",
			st.ConcurrentSessions, active, st.ActiveWindowSeconds)
	}
	for _, w := range st.Warnings {
		if strings.Contains(w, "overcommitted") {
			t.Errorf("warned with %d of 51 conversations active: %s", st.ConcurrentSessions, w)
		}
	}
	clk.add(time.Hour / 2)
	if st = coreOf(p).Status(); st.ConcurrentSessions != 0 || st.Sessions != 51 {
		t.Errorf("half an hour later: %d active of %d, want 0 of 51", st.ConcurrentSessions, st.Sessions)
	}
}

// TestReturningReplicaRampsUp: a replica back from a restart, empty, takes
// about its share of the new conversations during its ramp-up instead of
// every one of them, and its full share once the ramp-up is over.
func TestReturningReplicaRampsUp(t *testing.T) {
	run := func(t *testing.T, ramp time.Duration, seed uint64) (during, after int) {
		clk := &fakeClock{t: time.Unix(1_000_000, 0)}
		engines := []*fakeEngine{newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)}
		p, front := testProxy(t, testConfig{Config: router.Config{Policy: "sticky", Clock: clk.now, RampUp: ramp, Seed: seed}}, engines...)
		onZero := func(prefix string, n int) (k int) {
			for i := range n {
				resp, body := post(t, front.URL+"/v1/chat/completions", chatBody(fmt.Sprint(prefix, i), false, ""))
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				if resp.Header.Get(identity.PinHeader) == "0" {
					k++
				}
			}
			settled(t, p)
			return k
		}
		coreOf(p).SetReplicaState(0, false, "loading", "restart")
		if k := onZero("old-", 12); k != 0 {
			t.Fatalf("%d conversations went to the replica that is down", k)
		}
		coreOf(p).NoteRestart(0)
		coreOf(p).SetReplicaState(0, true, "healthy", "")
		during = onZero("new-", 6)
		clk.add(ramp + time.Second)
		after = onZero("later-", 3)
		return during, after
	}
	if during, _ := run(t, 0, 1); during != 6 {
		t.Fatalf("without a ramp-up the empty replica took %d of 6 new conversations, want all 6", during)
	}
	// Ramping, it competes as if it carried the others' mean load: it wins
	// its share of the ties (a third here), over five tie-break seeds.
	total := 0
	for seed := uint64(1); seed <= 5; seed++ {
		during, after := run(t, 30*time.Second, seed)
		total += during
		if after < 1 {
			t.Errorf("seed %d: after the ramp-up it took none of 3 new conversations, though the least loaded", seed)
		}
	}
	if total < 4 || total > 20 {
		t.Errorf("ramping: the returning replica took %d of 5 x 6 new conversations, want about a third (4-20; without a ramp-up 30)", total)
	}
}
