package place

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lmwarden/warden/router/place/placetest"
)

// waits is four replicas with room whose measured times to first byte are
// 0.9 s at home (rank 0), 0.2 s on rank 1 and 0.5 s on the others, rank 1
// idle, with prefill measured at perToken seconds a token.
func waits(perToken float64) []ReplicaView {
	return with(kv4(30000, 10000, 30000, 30000), func(s []ReplicaView) {
		s[0].WaitSeconds, s[1].WaitSeconds, s[2].WaitSeconds, s[3].WaitSeconds = 0.9, 0.2, 0.5, 0.5
		s[0].InFlight, s[2].InFlight, s[3].InFlight = 3, 3, 3
		s[0].PrefillSecPerToken, s[1].PrefillSecPerToken = perToken, perToken
	})
}

// kv4 is four healthy replicas of 40k tokens of KV, 10 s turns.
func kv4(ws ...int) []ReplicaView {
	s := idle4()
	for i := range s {
		s[i].KVCapacity, s[i].TurnSeconds, s[i].WaitSeconds = 40000, 10, 1
		if i < len(ws) {
			s[i].WorkingSet = ws[i]
		}
	}
	return s
}

// tier gives every replica of s a host KV tier of tokens.
func tier(s []ReplicaView, tokens int) []ReplicaView {
	for i := range s {
		s[i].HostKVTokens = tokens
	}
	return s
}

func TestPickAdaptive(t *testing.T) {
	cfg := Config{Policy: PolicyAdaptive}
	fresh := SessionView{Key: "s", Footprint: 10000, ResidentOn: -1, TurnsSinceMove: 1 << 30}
	known := func(home, resident, sinceMove int) SessionView {
		return SessionView{Key: "s", Known: true, Home: home, Footprint: 10000, ResidentOn: resident, TurnsSinceMove: sinceMove}
	}
	busy := func(s []ReplicaView) []ReplicaView {
		for i := range s {
			s[i].InFlight = 4
		}
		return s
	}
	tests := []struct {
		name string
		snap []ReplicaView
		sess SessionView
		cfg  Config
		want Decision
	}{
		{"a new conversation goes to the least-loaded replica with room",
			with(kv4(35000, 20000, 10000, 32000), func(s []ReplicaView) { s[2].InFlight = 3; s[3].InFlight = 1 }),
			fresh, cfg, Decision{1, ReasonNew}},
		{"a replica without room is skipped even when it is idle",
			with(kv4(35000, 38000, 30000, 31000), func(s []ReplicaView) { s[0].InFlight = 0; s[2].InFlight = 2; s[3].InFlight = 1 }),
			fresh, cfg, Decision{2, ReasonNew}},
		{"sessions within the TTL placed under another policy do not count; those homed under this one do",
			with(kv4(0, 0, 0, 0), func(s []ReplicaView) {
				s[0].ActiveSessions, s[1].ActiveSessions, s[2].ActiveSessions, s[3].ActiveSessions = 30, 0, 0, 0
				s[1].Homed, s[2].Homed, s[3].Homed = 2, 1, 3
			}), fresh, cfg, Decision{0, ReasonNew}},
		{"no room anywhere: the new conversation waits at the warden",
			busy(kv4(35000, 38000, 36000, 39000)), fresh, cfg, Decision{-1, ReasonWait}},
		{"no room, but one replica overcommits by at most 5 % of its KV: it goes there, not to the wait",
			busy(kv4(35000, 31500, 36000, 39000)), fresh, cfg, Decision{1, ReasonNew}},
		{"within the slack on two replicas: the one with more room",
			busy(kv4(31000, 31900, 36000, 39000)), fresh, cfg, Decision{0, ReasonNew}},
		{"6 % over on the best replica: it waits",
			busy(kv4(32400, 38000, 36000, 39000)), fresh, cfg, Decision{-1, ReasonWait}},
		{"no room but waited past the bound (5 turns of 10 s): least loaded",
			with(busy(kv4(35000, 38000, 36000, 39000)), func(s []ReplicaView) { s[2].InFlight = 1 }),
			SessionView{Key: "s", Footprint: 10000, Waited: 51}, cfg, Decision{2, ReasonNew}},
		{"no room and the warden will not hold it any longer",
			busy(kv4(35000, 38000, 36000, 39000)), SessionView{Key: "s", Footprint: 10000, NoWait: true}, cfg, Decision{0, ReasonNew}},
		{"overload beyond what holding fixes (demand > 1.25 x room): no wait",
			busy(kv4(60000, 60000, 60000, 60000)), fresh, cfg, Decision{0, ReasonNew}},
		{"nothing in flight anywhere: waiting cannot make room",
			kv4(35000, 38000, 36000, 39000), fresh, cfg, Decision{0, ReasonNew}},
		{"a request without a session never waits",
			busy(kv4(35000, 38000, 36000, 39000)), SessionView{Footprint: 10000}, cfg, Decision{0, ReasonNew}},
		{"AdmitWait < 0 turns holding off",
			busy(kv4(35000, 38000, 36000, 39000)), fresh, Config{Policy: PolicyAdaptive, AdmitWait: -1}, Decision{0, ReasonNew}},
		{"a known conversation stays home while home has room",
			kv4(30000, 0, 0, 0), known(0, 0, 1<<30), cfg, Decision{0, ReasonSticky}},
		{"an overcommitted home with a long queue: the conversation moves where it fits",
			with(kv4(60000, 10000, 39000, 39000), func(s []ReplicaView) { s[0].WaitSeconds = 20; s[1].PrefillSecPerToken = 1e-4 }),
			known(0, -1, 1<<30), cfg, Decision{1, ReasonMove}},
		{"its prefix still resident at home: the re-prefill cost keeps it there",
			with(kv4(44000, 10000, 39000, 39000), func(s []ReplicaView) { s[0].WaitSeconds = 2; s[1].PrefillSecPerToken = 1e-3 }),
			known(0, 0, 1<<30), cfg, Decision{0, ReasonSticky}},
		{"a home with room but a longer wait: cheap prefill (a small model on CPUs) moves it, as a balancer would",
			waits(1e-5), known(0, 0, 1<<30), cfg, Decision{1, ReasonMove}}, // 10k tokens: 0.1 s
		{"the same wait with dear prefill (the reference rig's ~130 us a token): it stays",
			waits(1.3e-4), known(0, 0, 1<<30), cfg, Decision{0, ReasonSticky}}, // 10k tokens: 1.3 s
		{"cheap prefill, a longer wait measured at home, but home idle now: it stays",
			with(waits(1e-5), func(s []ReplicaView) { s[0].InFlight = 0 }), known(0, 0, 1<<30), cfg, Decision{0, ReasonSticky}},
		{"prefill cost not measured yet: no move on a wait alone",
			with(kv4(30000, 10000, 30000, 30000), func(s []ReplicaView) {
				s[0].WaitSeconds, s[1].WaitSeconds = 0.9, 0.2
				s[0].InFlight, s[2].InFlight, s[3].InFlight = 3, 3, 3
			}),
			known(0, 0, 1<<30), cfg, Decision{0, ReasonSticky}},
		{"hysteresis: moved two turns ago, it stays put",
			with(kv4(60000, 10000, 39000, 39000), func(s []ReplicaView) { s[0].WaitSeconds = 20 }),
			known(0, -1, 2), cfg, Decision{0, ReasonSticky}},
		{"home over the spill threshold spills this request (seed rule)",
			with(kv4(30000, 0, 0, 0), func(s []ReplicaView) { s[0].InFlight = 9; s[1].InFlight = 1; s[2].InFlight = 2; s[3].InFlight = 3 }),
			known(0, 0, 1<<30), cfg, Decision{1, ReasonSpill}},
		{"an unhealthy home fails over to a replica with room",
			with(kv4(0, 39000, 10000, 20000), func(s []ReplicaView) { s[0].Healthy = false }),
			known(0, 0, 1<<30), cfg, Decision{2, ReasonFailover}},
		{"a host KV tier is room: where the GPUs alone would make it wait, it goes to the least loaded",
			tier(busy(kv4(35000, 38000, 36000, 39000)), 160000), fresh, cfg, Decision{0, ReasonNew}},
		{"a tier of unknown size counts as ample",
			tier(busy(kv4(35000, 38000, 36000, 39000)), HostKVUnknown), fresh, cfg, Decision{0, ReasonNew}},
		{"a tier too small for the overflow: it still waits",
			tier(busy(kv4(35000, 38000, 36000, 39000)), 2000), fresh, cfg, Decision{-1, ReasonWait}},
		{"with a tier, an overcommitted GPU at home is no reason to move: the prefix resumes from the tier",
			// Without the tier the overcommit (1.5x) makes home's expected wait
			// 3 s against 1 s + a 1 s re-prefill elsewhere: it would move.
			tier(with(kv4(60000, 10000, 39000, 39000), func(s []ReplicaView) { s[0].WaitSeconds = 2; s[1].PrefillSecPerToken = 1e-4 }), 160000),
			known(0, 0, 1<<30), cfg, Decision{0, ReasonSticky}},
		{"the same without a tier: it moves",
			with(kv4(60000, 10000, 39000, 39000), func(s []ReplicaView) { s[0].WaitSeconds = 2; s[1].PrefillSecPerToken = 1e-4 }),
			known(0, 0, 1<<30), cfg, Decision{1, ReasonMove}},
		{"without KV capacity the sticky rule applies",
			with(idle4(), func(s []ReplicaView) { s[0].InFlight = 1 }), fresh, cfg, Decision{1, ReasonNew}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Pick(tc.snap, tc.sess, tc.cfg, placetest.FixedRand(0))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestMemoryResidency: Memory places a finished conversation's prefix on
// the replica that served it, as long as the most recent ones fit in its
// KV; one in flight counts in the replica's working set until it ends, and
// End is idempotent.
func TestMemoryResidency(t *testing.T) {
	m := NewMemory(0)
	t0 := time.Unix(0, 0)
	snap := []ReplicaView{{Rank: 0, Healthy: true, KVCapacity: 30000}}
	// Three conversations of 12k tokens (2k shared) finish on replica 0 in
	// the order a, b, c: with 30k of KV only the two most recent fit.
	for i, k := range []string{"a", "b", "c"} {
		tk := m.Begin(k, 48000, 0, ReasonNew, t0)
		m.End(tk, Report{Known: true, Prompt: 11800, Cached: 2000, Completion: 200}, 1, t0.Add(time.Duration(i+1)*time.Second))
	}
	for k, want := range map[string]int{"a": -1, "b": 0, "c": 0} {
		sv := SessionView{Key: k}
		m.ViewSession(&sv, 48000, snap)
		if sv.ResidentOn != want || sv.Footprint != 10000 {
			t.Errorf("%s: resident on %d, footprint %d; want %d, 10000", k, sv.ResidentOn, sv.Footprint, want)
		}
	}
	// One in flight: its footprint counts in the working set until it ends.
	tk := m.Begin("d", 48000, 0, ReasonNew, t0.Add(10*time.Second))
	m.FillView(snap, t0.Add(10*time.Second))
	if got := snap[0].WorkingSet; got < 10000 || snap[0].Active != 1 {
		t.Errorf("working set with one in flight = %d (active %d)", got, snap[0].Active)
	}
	m.End(tk, Report{}, -1, t0.Add(20*time.Second))
	m.FillView(snap, t0.Add(time.Hour))
	if snap[0].Active != 0 {
		t.Errorf("active long after the end = %d", snap[0].Active)
	}
	m.End(tk, Report{}, -1, t0) // idempotent
	if m.rep(0).inflight != 0 || m.rep(0).flyTok != 0 {
		t.Errorf("in flight after double end: %d / %d", m.rep(0).inflight, m.rep(0).flyTok)
	}
}

// TestMemoryForgetsARemovedReplica: a removed replica leaves Memory: its shared-prefix estimate
// no longer counts, its conversations are resident nowhere, and a request
// that was running there ends without bringing it back.
func TestMemoryForgetsARemovedReplica(t *testing.T) {
	m := NewMemory(0)
	t0 := time.Unix(0, 0)
	for rank, shared := range []uint64{2000, 6000} {
		tk := m.Begin(fmt.Sprint("first-", rank), 48000, rank, ReasonNew, t0)
		m.End(tk, Report{Known: true, Prompt: 11800, Cached: shared, Completion: 200}, 1, t0.Add(time.Second))
	}
	if got := m.bestShared(); got != 6000 {
		t.Fatalf("best shared prefix %d, want replica 1's 6000", got)
	}
	running := m.Begin("first-1", 48000, 1, ReasonSticky, t0.Add(2*time.Second))
	m.Forget(1)
	if got := m.bestShared(); got != 2000 {
		t.Errorf("after removing replica 1: best shared prefix %d, want replica 0's 2000", got)
	}
	sv := SessionView{Key: "first-1"}
	m.ViewSession(&sv, 48000, []ReplicaView{{Rank: 0, Healthy: true, KVCapacity: 30000}})
	if sv.ResidentOn != -1 {
		t.Errorf("a conversation of the removed replica is resident on %d", sv.ResidentOn)
	}
	m.End(running, Report{Known: true, Prompt: 12000, Cached: 11000, Completion: 100}, 1, t0.Add(3*time.Second))
	if _, back := m.reps[1]; back {
		t.Error("the end of a request that ran on the removed replica brought its state back")
	}
}

// TestMemoryBound: Memory remembers at most its bound of conversations.
func TestMemoryBound(t *testing.T) {
	m := NewMemory(3)
	for i := range 10 {
		tk := m.Begin(fmt.Sprint(i), 1000, i%2, ReasonNew, time.Unix(0, 0))
		m.End(tk, Report{}, -1, time.Unix(1, 0))
	}
	if len(m.sess) != 3 {
		t.Errorf("remembered %d conversations, bound 3", len(m.sess))
	}
}

// BenchmarkPickAdaptive measures one decision with its snapshot work
// (Memory.fill + sessionView + Pick) at 8 replicas and 10k sessions.
func BenchmarkPickAdaptive(b *testing.B) {
	m := NewMemory(0)
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(0, 0)
	for i := range 10000 {
		tk := m.Begin(fmt.Sprint(i), 48000, i%8, ReasonNew, t0)
		m.End(tk, Report{Known: true, Prompt: 12000, Cached: 3500, Completion: 256}, 0.5, t0.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range 32 { // 4 in flight per replica
		m.Begin(fmt.Sprint(i), 48000, i%8, ReasonSticky, t0.Add(11*time.Second))
	}
	snap := make([]ReplicaView, 8)
	for i := range snap {
		snap[i] = ReplicaView{Rank: i, Healthy: true, MaxNumSeqs: 32, KVCapacity: 40000, InFlight: 4}
	}
	now := t0.Add(12 * time.Second)
	cfg := Config{Policy: PolicyAdaptive}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.FillView(snap, now)
		sv := SessionView{Key: fmt.Sprint(i % 10000), Known: true, Home: i % 8}
		m.ViewSession(&sv, 48000, snap)
		if d := Pick(snap, sv, cfg, rng); d.Rank < 0 && d.Reason != ReasonWait {
			b.Fatal(d)
		}
	}
}

// TestMemoryForgetsAWipedCache: after Wiped the replica's conversations are
// resident nowhere, its shared-prefix estimate is gone (a new conversation's
// footprint no longer counts on it), its homed count restarts, and the next
// placement of one of its conversations counts as a first placement; its
// timing estimates stay.
func TestMemoryForgetsAWipedCache(t *testing.T) {
	m := NewMemory(0)
	t0 := time.Unix(0, 0)
	tk := m.Begin("c", 48000, 0, ReasonNew, t0)
	m.End(tk, Report{Known: true, Prompt: 11800, Cached: 6000, Completion: 200}, 1, t0.Add(time.Second))
	snap := []ReplicaView{{Rank: 0, Healthy: true, KVCapacity: 30000}, {Rank: 1, Healthy: true, KVCapacity: 30000}}
	sv := SessionView{Key: "c"}
	m.ViewSession(&sv, 48000, snap)
	if sv.ResidentOn != 0 || m.bestShared() != 6000 || m.homed[0] != 1 {
		t.Fatalf("before: resident %d, shared %d, homed %d", sv.ResidentOn, m.bestShared(), m.homed[0])
	}
	turn := m.reps[0].turn
	m.Wiped(0)
	sv = SessionView{Key: "c"}
	m.ViewSession(&sv, 48000, snap)
	if sv.ResidentOn != -1 {
		t.Errorf("after the wipe the prefix is resident on %d", sv.ResidentOn)
	}
	if got := m.bestShared(); got != 0 {
		t.Errorf("after the wipe the shared prefix estimate is %d", got)
	}
	if m.homed[0] != 0 {
		t.Errorf("after the wipe %d conversations count as homed there", m.homed[0])
	}
	if m.reps[0].turn != turn {
		t.Error("the wipe lost the replica's turn-time estimate")
	}
	view := make([]ReplicaView, len(snap))
	copy(view, snap)
	m.FillView(view, t0.Add(time.Second))
	if view[0].WorkingSet != 0 {
		t.Errorf("after the wipe the working set is %d tokens", view[0].WorkingSet)
	}
	tk = m.Begin("c", 48000, 1, ReasonNew, t0.Add(2*time.Second)) // placed by load elsewhere
	if m.homed[1] != 1 {
		t.Errorf("the re-placement counts %d homed on its new replica, want 1", m.homed[1])
	}
	m.End(tk, Report{}, -1, t0.Add(3*time.Second))
}

// TestSessionTableUnhome: Unhome leaves the sessions of the wiped replica
// without a home (and out of its count) until Rehome gives them one.
func TestSessionTableUnhome(t *testing.T) {
	tb := NewTable(0, 0)
	now := time.Unix(0, 0)
	a, b := tb.Insert("a", 0, now), tb.Insert("b", 1, now)
	tb.Insert("c", 0, now)
	if n := tb.Unhome(0); n != 2 {
		t.Fatalf("Unhome(0) = %d, want 2", n)
	}
	if a.Home() != -1 || b.Home() != 1 || tb.Active(0) != 0 || tb.Active(1) != 1 {
		t.Fatalf("homes a=%d b=%d, active %d/%d", a.Home(), b.Home(), tb.Active(0), tb.Active(1))
	}
	tb.Rehome(a, 1)
	if a.Home() != 1 || tb.Active(1) != 2 || tb.Len() != 3 {
		t.Errorf("after Rehome: home %d, active(1) %d, len %d", a.Home(), tb.Active(1), tb.Len())
	}
}
