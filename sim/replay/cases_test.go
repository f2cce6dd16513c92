package replay

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/sim/model"
)

// The replay workloads and tables behind docs/router.md. The tables print,
// they do not assert: WARDEN_REPLAY=1 go test -run
// 'TestReplay(Explore|Sweep|Workloads|Scan)' -v ./sim/replay/. TestReplayAdmission
// asserts.

// calLoad is the calibrated reference (docs/calibration.md): the -fit
// profile (WARDEN_REPLAY_PROFILE names another, e.g. the -fit-v1 that
// docs/router.md §4 was measured on), one pool of sessions carried over
// stages 4..32, 250 ms client round trip.
func calLoad(policy string) replayLoad {
	l := refLoad(policy, 0)
	l.stages, l.rtt, l.profile = []int{4, 8, 16, 24, 32}, 0.25, model.ReferenceProfile
	if p := os.Getenv("WARDEN_REPLAY_PROFILE"); p != "" {
		l.profile = p
	}
	return l
}

// exploring runs the tables behind docs/router.md (WARDEN_REPLAY=1).
func exploring(t *testing.T) {
	if os.Getenv("WARDEN_REPLAY") == "" {
		t.Skip("set WARDEN_REPLAY=1 to print the replay tables")
	}
}

func TestReplayExplore(t *testing.T) {
	exploring(t)
	for _, pol := range []string{place.PolicyOff, place.PolicySticky, place.PolicyAdaptive} {
		for seed := range uint64(2) {
			l := calLoad(pol)
			l.seed = seed
			for i, r := range l.runAll() {
				t.Logf("%2d %-8s %v", l.stages[i], pol, r)
			}
		}
	}
}

func TestReplaySweep(t *testing.T) {
	exploring(t)
	for _, turns := range envFloats("SWEEP_TURNS", 2, 5) {
		for _, mo := range envFloats("SWEEP_MO", 0.15, 0.25, 0.35) {
			for _, mk := range []func(string) replayLoad{calLoad, mixedLoad} {
				l := mk(place.PolicyAdaptive)
				l.cfg = func(c *place.Config) { c.AdmitTurns, c.MaxOverflow = turns, mo }
				for i, r := range l.runAll() {
					if l.stages[i] >= 16 {
						t.Logf("%2d turns %.0f mo %.2f %v", l.stages[i], turns, mo, r)
					}
				}
			}
		}
	}
}

// TestReplayQuantum sweeps conversation-level scheduling (replayLoad's
// quantum and slots) over the calibrated reference and the mixed load,
// against sticky and adaptive alone: the trade-off of docs/router.md's
// "Conversation scheduling". QUANTUM_POLICY names the placement under it
// (default sticky).
func TestReplayQuantum(t *testing.T) {
	exploring(t)
	base := envString("QUANTUM_POLICY", place.PolicySticky)
	for _, mk := range []struct {
		name string
		f    func(string) replayLoad
	}{{"reference", calLoad}, {"mixed", mixedLoad}} {
		for seed := range uint64(2) {
			for _, pol := range []string{place.PolicyOff, place.PolicySticky, place.PolicyAdaptive} {
				l := mk.f(pol)
				l.seed = seed
				for i, r := range l.runAll() {
					if l.stages[i] >= 16 {
						t.Logf("%-9s seed %d %2d %-8s              %v", mk.name, seed, l.stages[i], pol, r)
					}
				}
			}
			for _, slots := range envFloats("QUANTUM_SLOTS", 3, 4) {
				for _, q := range envFloats("QUANTUM_TURNS", 1, 2, 3, 6) {
					for _, hold := range envFloats("QUANTUM_HOLD", 0) {
						l := mk.f(base)
						l.seed, l.quantum, l.slots, l.anySlot = seed, int(q), int(slots), os.Getenv("QUANTUM_ANY") != ""
						l.maxHold = hold
						for i, r := range l.runAll() {
							if l.stages[i] >= 16 {
								t.Logf("%-9s seed %d %2d %-8s slots %d q %d hold %2.0f %v", mk.name, seed, l.stages[i], base, int(slots), int(q), hold, r)
							}
						}
					}
				}
			}
		}
	}
}

// TestReplayWorkloads prints the second workloads of docs/router.md.
func TestReplayWorkloads(t *testing.T) {
	exploring(t)
	loads := map[string]func(pol string) replayLoad{
		"dp8-carry-8..48": func(pol string) replayLoad {
			l := calLoad(pol)
			l.replicas, l.stages = 8, []int{8, 16, 32, 40, 48}
			return l
		},
		"long-10turns-carry": func(pol string) replayLoad {
			l := calLoad(pol)
			l.turns = 10
			return l
		},
		"mixed-carry": mixedLoad,
	}
	for _, name := range []string{"dp8-carry-8..48", "long-10turns-carry", "mixed-carry"} {
		for _, pol := range []string{place.PolicyOff, place.PolicySticky, place.PolicyAdaptive} {
			l := loads[name](pol)
			for i, r := range l.runAll() {
				t.Logf("%s %2d %-8s %v", name, l.stages[i], pol, r)
			}
		}
	}
}

func TestReplayScan(t *testing.T) {
	exploring(t)
	type v struct {
		name string
		mk   func(l *replayLoad)
	}
	for _, w := range []v{
		{"first4000", func(l *replayLoad) { l.first = 4000 }},
		{"kv48k", func(l *replayLoad) { l.kvTokens = 48000 }},
		{"turns8", func(l *replayLoad) { l.turns = 8 }},
		{"out512", func(l *replayLoad) { l.out = 512 }},
	} {
		res := map[string][]replayResult{}
		var stages []int
		for _, pol := range []string{place.PolicyOff, place.PolicySticky, place.PolicyAdaptive} {
			l := calLoad(pol)
			l.stages = []int{8, 12, 16, 20, 24}
			w.mk(&l)
			res[pol] = l.runAll()
			stages = l.stages
		}
		for i, n := range stages {
			a, s, o := res[place.PolicyAdaptive][i], res[place.PolicySticky][i], res[place.PolicyOff][i]
			win := a.p50 <= min(s.p50, o.p50) && a.p95 <= min(s.p95, o.p95) && a.outPerMin >= max(s.outPerMin, o.outPerMin) && a.hitPct >= s.hitPct
			t.Logf("%-9s %2d win=%v A %.2f/%.2f/%.0f/%.1f S %.2f/%.2f/%.0f/%.1f O %.2f/%.2f/%.0f/%.1f", w.name, n, win,
				a.p50, a.p95, a.outPerMin, a.hitPct, s.p50, s.p95, s.outPerMin, s.hitPct, o.p50, o.p95, o.outPerMin, o.hitPct)
		}
	}
}

// mixedLoad is the calibrated reference with mixed session lengths: a
// third each of short (2k first message, 10 follow-ups), reference (7.3k,
// 5) and long (15k, 3) conversations.
func mixedLoad(pol string) replayLoad {
	l := calLoad(pol)
	l.firstOf = func(k int) (int, int) { return []int{2000, 7300, 15000}[k%3], []int{10, 5, 3}[k%3] }
	return l
}

// TestReplayAdmission: with mixed conversation lengths at 16 sessions the
// working sets overflow the KV by a little; holding new conversations
// until they fit beats both sticky and off on TTFB p95, output and prefix
// hits. Below that nothing is held and the policy is the sticky rule.
func TestReplayAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 3 policies x 3 stages")
	}
	run := func(pol string) []replayResult {
		l := mixedLoad(pol)
		l.stages = []int{4, 8, 16}
		return l.runAll()
	}
	ad, st, off := run(place.PolicyAdaptive), run(place.PolicySticky), run(place.PolicyOff)
	for i, n := range []int{4, 8, 16} {
		t.Logf("%d sessions\nadaptive %v\nsticky   %v\noff      %v", n, ad[i], st[i], off[i])
		if ad[i].hitPct < st[i].hitPct-1 || ad[i].outPerMin < 0.97*st[i].outPerMin {
			t.Errorf("%d sessions: adaptive worse than sticky on hits or output", n)
		}
	}
	a, s, o := ad[2], st[2], off[2]
	if a.p95 >= min(s.p95, o.p95) || a.outPerMin <= max(s.outPerMin, o.outPerMin) || a.hitPct <= s.hitPct {
		t.Errorf("16 sessions: adaptive does not beat sticky and off on p95, output and hits")
	}
}

func (r replayResult) String() string {
	return fmt.Sprintf("p50 %6.2f p95 %6.2f (all %6.2f) out/min %6.0f hit %5.1f%% turns %d late %d waited %d preempt %d reprefill %dk moves %d wait/rep %v sess/rep %v",
		r.p50, r.p95, r.p95all, r.outPerMin, r.hitPct, r.turns, r.late, r.waited, r.preempt, r.reprefill/1000, r.moves,
		roundAll(r.repWait), roundAll(r.repSess))
}

func roundAll(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x*10) / 10
	}
	return out
}

// TestReplayHostTier: the replay drives the simulator's host KV tier, so
// routing research sees reloads as the simulator does. At 24 reference
// sessions the working sets overflow four cards' KV (every policy
// re-prefills nearly every turn); a 16 GiB tier per replica (three times a
// card's KV) serves most of that from host memory, as the simulated
// reference rig measured (docs/kv-offload.md: output +60 %, p50 halved).
// hitPct is the GPU prefix cache's (vLLM counts host hits apart); the
// prompt tokens computed fall instead.
func TestReplayHostTier(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 2 runs of 24 sessions")
	}
	run := func(gib float64) replayResult {
		l := refLoad(place.PolicyAdaptive, 24)
		l.hostGiB = gib
		return l.run()
	}
	none, tier := run(0), run(16)
	t.Logf("no tier: %v\n16 GiB:  %v", none, tier)
	perTurn := func(r replayResult) float64 { return float64(r.computed) / float64(max(r.turns, 1)) }
	if perTurn(tier) > 0.5*perTurn(none) || tier.outPerMin < 1.3*none.outPerMin || tier.p50 >= 0.75*none.p50 {
		t.Errorf("the tier does not show: computed prompt tokens a turn %.0f -> %.0f, output %.0f -> %.0f, p50 %.2f -> %.2f s",
			perTurn(none), perTurn(tier), none.outPerMin, tier.outPerMin, none.p50, tier.p50)
	}
}
