package place

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/router/place/placetest"
)

// four healthy idle replicas with max_num_seqs 32 (auto spill threshold 8).
func idle4() []ReplicaView {
	s := make([]ReplicaView, 4)
	for i := range s {
		s[i] = ReplicaView{Rank: i, Healthy: true, MaxNumSeqs: 32}
	}
	return s
}

func with(s []ReplicaView, f func(s []ReplicaView)) []ReplicaView { f(s); return s }

func TestPick(t *testing.T) {
	sticky := Config{Policy: PolicySticky}
	known := func(home int) SessionView { return SessionView{Key: "s", Known: true, Home: home} }
	fresh := SessionView{Key: "s"}
	tests := []struct {
		name string
		snap []ReplicaView
		sess SessionView
		cfg  Config
		rng  placetest.FixedRand
		want Decision
	}{
		{"a new conversation goes to the least-loaded replica", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight, s[1].InFlight, s[2].InFlight, s[3].InFlight = 3, 2, 0, 1
		}), fresh, sticky, 0, Decision{2, ReasonNew}},
		{"active conversations count as load for new ones", with(idle4(), func(s []ReplicaView) {
			s[0].ActiveSessions, s[1].ActiveSessions, s[2].ActiveSessions = 2, 2, 2
		}), fresh, sticky, 0, Decision{3, ReasonNew}},
		{"KV fill breaks a tie of in-flight and sessions", with(idle4(), func(s []ReplicaView) {
			s[0].KVUsed, s[1].KVUsed, s[2].KVUsed, s[3].KVUsed = 0.9, 0.5, 0.1, 0.7
		}), fresh, sticky, 0, Decision{2, ReasonNew}},
		{"exact ties are broken by the random source", idle4(), fresh, sticky, 3, Decision{3, ReasonNew}},
		{"a request without a session is placed like a new one", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight = 1
		}), SessionView{}, sticky, 0, Decision{1, ReasonNew}},
		{"a known conversation stays home even when home is busier", with(idle4(), func(s []ReplicaView) {
			s[1].InFlight = 5
		}), known(1), sticky, 0, Decision{1, ReasonSticky}},
		{"home exactly at the spill threshold keeps the turn", with(idle4(), func(s []ReplicaView) {
			s[1].InFlight = 8
		}), known(1), sticky, 0, Decision{1, ReasonSticky}},
		{"home above the auto threshold (32/4=8) spills to the least-loaded other", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight, s[1].InFlight, s[2].InFlight, s[3].InFlight = 4, 9, 2, 3
		}), known(1), sticky, 0, Decision{2, ReasonSpill}},
		{"an explicit spill threshold overrides auto", with(idle4(), func(s []ReplicaView) {
			s[1].InFlight = 3
		}), known(1), Config{Policy: PolicySticky, SpillThreshold: 2}, 0, Decision{0, ReasonSpill}},
		{"no spill when every other replica is at least as busy", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight, s[1].InFlight, s[2].InFlight, s[3].InFlight = 9, 9, 10, 12
		}), known(1), sticky, 0, Decision{1, ReasonSticky}},
		{"unknown max_num_seqs gives threshold 1", []ReplicaView{
			{Rank: 0, Healthy: true, InFlight: 2}, {Rank: 1, Healthy: true},
		}, known(0), sticky, 0, Decision{1, ReasonSpill}},
		{"an unhealthy home fails over to the least-loaded replica", with(idle4(), func(s []ReplicaView) {
			s[1].Healthy = false
			s[0].InFlight, s[2].InFlight = 1, 1
		}), known(1), sticky, 0, Decision{3, ReasonFailover}},
		{"a home rank that no longer exists fails over", idle4(), known(9), sticky, 0, Decision{0, ReasonFailover}},
		{"spill never goes to an unhealthy replica", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight, s[1].InFlight, s[2].Healthy, s[3].Healthy = 20, 3, false, false
		}), known(0), sticky, 0, Decision{1, ReasonSpill}},
		{"nothing healthy means no decision", with(idle4(), func(s []ReplicaView) {
			for i := range s {
				s[i].Healthy = false
			}
		}), fresh, sticky, 0, Decision{-1, ReasonNone}},
		{"a pin wins over stickiness", idle4(), SessionView{Key: "s", Known: true, Home: 1, Pinned: true, Pin: 3}, sticky, 0, Decision{3, ReasonPinned}},
		{"a pin wins under off too", idle4(), SessionView{Pinned: true, Pin: 2}, Config{Policy: PolicyOff}, 0, Decision{2, ReasonPinned}},
		{"a pin to an unhealthy replica is refused", with(idle4(), func(s []ReplicaView) {
			s[2].Healthy = false
		}), SessionView{Pinned: true, Pin: 2}, sticky, 0, Decision{-1, ReasonNone}},
		{"a pin to a rank that does not exist is refused", idle4(), SessionView{Pinned: true, Pin: 7}, sticky, 0, Decision{-1, ReasonNone}},
		{"off scores 4*waiting+running and ignores the session", with(idle4(), func(s []ReplicaView) {
			s[0].StaleRunning, s[0].StaleWaiting = 1, 1 // 5
			s[1].StaleRunning = 4                       // 4
			s[2].StaleRunning, s[2].StaleWaiting = 0, 2 // 8
			s[3].StaleRunning = 6                       // 6
		}), known(0), Config{Policy: PolicyOff}, 0, Decision{1, ReasonOff}},
		{"off counts requests sent since the stats refresh as waiting", with(idle4(), func(s []ReplicaView) {
			s[0].SentSince = 1 // 4
			s[1].StaleRunning, s[2].StaleRunning, s[3].StaleRunning = 2, 3, 5
		}), fresh, Config{Policy: PolicyOff}, 0, Decision{1, ReasonOff}},
		{"off breaks ties to the lowest rank, not at random", with(idle4(), func(s []ReplicaView) {
			s[0].StaleRunning = 1
		}), fresh, Config{Policy: PolicyOff}, 2, Decision{1, ReasonOff}},
		{"off does not see fresh in-flight counts between refreshes", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight = 0
			s[0].StaleRunning = 1 // stale: it finished since
			s[1].InFlight = 3     // stale: not yet counted
		}), fresh, Config{Policy: PolicyOff}, 0, Decision{1, ReasonOff}},
		{"off-v2 takes max(in-flight, waiting+running)", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight, s[1].StaleRunning, s[2].InFlight, s[3].InFlight = 3, 2, 1, 2
		}), fresh, Config{Policy: PolicyOffV2}, 0, Decision{2, ReasonOff}},
		{"off-v2 penalises waiting once KV use passes 50%", with(idle4(), func(s []ReplicaView) {
			s[0].StaleWaiting, s[0].KVUsed = 2, 0.9 // 2 + 2 x 6 x 0.4 = 6.8 (2 without the penalty)
			s[1].StaleRunning = 3                   // 3
			s[2].StaleRunning, s[3].StaleRunning = 3, 3
		}), fresh, Config{Policy: PolicyOffV2}, 0, Decision{1, ReasonOff}},
		{"off-v2: the penalty ramps from half the KV cache", with(idle4(), func(s []ReplicaView) {
			s[0].StaleWaiting, s[0].KVUsed = 2, 0.55 // 2 + 2 x 6 x 0.05 = 2.6
			s[1].StaleRunning = 3
			s[2].StaleRunning, s[3].StaleRunning = 3, 3
		}), fresh, Config{Policy: PolicyOffV2}, 0, Decision{0, ReasonOff}},
		{"off: ties go to the first from the rotating scan start (vLLM 0.25+)", with(idle4(), func(s []ReplicaView) {
			s[0].StaleRunning = 1 // 0 is busier; 1, 2, 3 tie
		}), SessionView{ScanStart: 2}, Config{Policy: PolicyOff}, 0, Decision{2, ReasonOff}},
		{"off-v2: the scan wraps", idle4(), SessionView{ScanStart: 3}, Config{Policy: PolicyOffV2}, 0, Decision{3, ReasonOff}},
		{"least-inflight uses exact counts and random ties", with(idle4(), func(s []ReplicaView) {
			s[0].InFlight, s[2].InFlight = 1, 1
		}), known(0), Config{Policy: PolicyLeastInFlight}, 1, Decision{3, ReasonOff}},
		{"hash ignores load", with(idle4(), func(s []ReplicaView) {
			s[hashRank("conv-a", 4)].InFlight = 30
		}), SessionView{Key: "conv-a"}, Config{Policy: PolicyHash}, 0, Decision{hashRank("conv-a", 4), ReasonHash}},
		{"hash probes the next rank when its replica is down", with(idle4(), func(s []ReplicaView) {
			s[hashRank("conv-a", 4)].Healthy = false
		}), SessionView{Key: "conv-a"}, Config{Policy: PolicyHash}, 0, Decision{(hashRank("conv-a", 4) + 1) % 4, ReasonHash}},
		{"an unknown policy decides nothing", idle4(), fresh, Config{Policy: "nope"}, 0, Decision{-1, ReasonNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Pick(tt.snap, tt.sess, tt.cfg, tt.rng)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Pick (-want +got):\n%s", diff)
			}
		})
	}
}

func hashRank(key string, n int) int {
	d := pickHash(idle4()[:n], SessionView{Key: key}, Config{}, placetest.FixedRand(0))
	return d.Rank
}

func TestHashSpreadsKeysOverReplicas(t *testing.T) {
	seen := map[int]int{}
	for i := range 400 {
		seen[hashRank(string(rune('a'+i%26))+string(rune('A'+i/26)), 4)]++
	}
	if len(seen) != 4 {
		t.Fatalf("hash used %d of 4 replicas: %v", len(seen), seen)
	}
}

func TestSpillForAuto(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		maxSeqs   int
		threshold int
	}{
		{"reference setup: 32 seqs gives 8", Config{}, 32, 8},
		{"vLLM default 256 gives 64", Config{}, 256, 64},
		{"tiny max_num_seqs never gives 0", Config{}, 2, 1},
		{"override wins", Config{SpillThreshold: 4}, 32, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.SpillFor(ReplicaView{MaxNumSeqs: tt.maxSeqs}); got != tt.threshold {
				t.Errorf("SpillFor = %d, want %d", got, tt.threshold)
			}
		})
	}
}

func TestValidPolicy(t *testing.T) {
	for _, p := range Policies() {
		if err := ValidPolicy(p); err != nil {
			t.Errorf("ValidPolicy(%q) = %v", p, err)
		}
	}
	if err := ValidPolicy("fastest"); err == nil {
		t.Error("ValidPolicy(fastest) = nil, want an error")
	}
}

// TestNewPlacementsAvoidStaleAndRampUp: new conversations go to a replica
// with stale metrics only when every replica's are stale, and a replica that
// just re-entered the rotation takes about its share of them instead of
// every one until its load catches up. The replicas report KV capacity, so
// that adaptive decides as itself (without one it is sticky).
func TestNewPlacementsAvoidStaleAndRampUp(t *testing.T) {
	idle4 := func() []ReplicaView {
		s := idle4()
		for i := range s {
			s[i].KVCapacity = 200_000
		}
		return s
	}
	for _, pol := range []string{PolicySticky, PolicyAdaptive} {
		cfg := Config{Policy: pol}
		t.Run(pol+"/stale", func(t *testing.T) {
			snap := idle4()
			snap[0].Stale = true // idle, but we do not know it
			snap[1].InFlight, snap[2].InFlight, snap[3].InFlight = 5, 5, 5
			for seed := range 20 {
				if d := Pick(snap, SessionView{Key: "n"}, cfg, placetest.FixedRand(seed)); d.Rank == 0 {
					t.Fatalf("seed %d: a new conversation went to the stale replica", seed)
				}
			}
			for i := range snap {
				snap[i].Stale = true
			}
			if d := Pick(snap, SessionView{Key: "n"}, cfg, placetest.FixedRand(0)); d.Rank != 0 {
				t.Errorf("all stale: went to %d, want the least loaded (0)", d.Rank)
			}
		})
		t.Run(pol+"/ramp", func(t *testing.T) {
			// Replicas 1-3 carry 6 conversations each; replica 0 is back, empty.
			// Place 12 new conversations one after another: without a ramp
			// the first 6 all go to 0; with one, 0 takes about a quarter.
			place := func(ramp float64) (onZero int) {
				snap := idle4()
				for i := 1; i < 4; i++ {
					snap[i].InFlight, snap[i].Homed = 6, 6
				}
				snap[0].Ramp = ramp
				for n := range 12 {
					d := Pick(snap, SessionView{Key: "n"}, cfg, placetest.FixedRand(n))
					snap[indexOf(snap, d.Rank)].InFlight++
					snap[indexOf(snap, d.Rank)].Homed++
					if d.Rank == 0 {
						onZero++
					}
				}
				return onZero
			}
			if got := place(0); got < 6 {
				t.Fatalf("without a ramp the empty replica took %d of 12, want >= 6", got)
			}
			if got := place(1); got < 2 || got > 5 {
				t.Errorf("ramping (1.0): the returning replica took %d of 12, want about 3", got)
			}
		})
		t.Run(pol+"/all-ramping", func(t *testing.T) {
			// At start every replica has just joined: none is held back.
			snap := idle4()
			snap[1].InFlight, snap[2].InFlight, snap[3].InFlight = 1, 1, 5
			for i := range snap {
				snap[i].Ramp = 0.9
			}
			for seed := range 20 {
				if d := Pick(snap, SessionView{Key: "n"}, cfg, placetest.FixedRand(seed)); d.Rank != 0 {
					t.Fatalf("seed %d: all ramping, went to %d, want the least loaded (0)", seed, d.Rank)
				}
			}
		})
	}
}
