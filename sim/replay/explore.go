package replay

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/sim/model"
)

// Exploration is one research run of the replay: tables behind
// docs/router.md and docs/calibration.md that print and do not assert.
// `go run ./sim/replay/cmd/replay NAME` runs one; the asserting cases are
// the package's tests.
type Exploration struct {
	Name string
	Doc  string // what it prints, and the environment variables it reads
	run  func(w io.Writer, k *knobs) error
}

// Run runs the exploration, printing its table to w; getenv supplies its
// settings (os.Getenv in the command). A setting that does not parse is an
// error that names it, returned before anything runs.
func (e Exploration) Run(w io.Writer, getenv func(string) string) error {
	return e.run(w, &knobs{getenv: getenv})
}

// Explorations are the replay's explorations, by name.
func Explorations() []Exploration {
	return []Exploration{
		{"explore", "off, sticky and adaptive on the calibrated reference load (stages 4..32, 2 seeds). WARDEN_REPLAY_PROFILE names another profile (e.g. the -fit-v1 that docs/router.md §4 was measured on).", explore},
		{"sweep", "adaptive's AdmitTurns x MaxOverflow on the calibrated and the mixed load, stages 16..32. SWEEP_TURNS (2,5), SWEEP_MO (0.15,0.25,0.35), WARDEN_REPLAY_PROFILE.", sweep},
		{"quantum", "conversation-level scheduling (slots per replica, turns per quantum, hold bound) on the calibrated and the mixed load against off, sticky and adaptive alone, stages 16..32 (docs/router.md addendum 4). QUANTUM_POLICY (sticky), QUANTUM_SLOTS (3,4), QUANTUM_TURNS (1,2,3,6), QUANTUM_HOLD (0 s), QUANTUM_ANY (set: any replica's free slot), WARDEN_REPLAY_PROFILE.", quantum},
		{"workloads", "the second workloads of docs/router.md (8 replicas at 8..48 sessions, 10-turn conversations, mixed lengths) under off, sticky and adaptive. WARDEN_REPLAY_PROFILE.", workloads},
		{"scan", "where adaptive wins all four columns (p50, p95, output, hits) against off and sticky: first message 4k, KV 48k, 8 turns, 512 output tokens, at 8..24 sessions. WARDEN_REPLAY_PROFILE.", scan},
		{"calibrate", "scores the physical profile's uncertain numbers (prefill x, KV tokens, decode GB/s, round trip) against the reference table (docs/calibration.md). CAL_PREFILL (1,1.5,2), CAL_KV (40000,44000), CAL_GBPS (310,360), CAL_RTT (0.25), CAL_SEEDS (2).", calibrate},
		{"router-verdict", "off, sticky and a third policy per stage and seed on the calibrated load, with a mark where the third is at or better than the better baseline. CAL_THIRD (adaptive), CAL_STAGES (4,8,16,24,32), CAL_SEEDS (2), CAL_KV, CAL_PREFILL (1), CAL_GBPS, CAL_FILL (the third's --kv-fill), CAL_SLACK (adaptive admission slack; 0 = none), CAL_MIXED (set: mixed lengths), CAL_REPLICAS (set: per-replica waits), WARDEN_REPLAY_PROFILE.", routerVerdict},
		{"imposed-homes", "sticky at 16 sessions with the sessions' homes imposed, balanced 4/4/4/4 against unbalanced spreads (docs/calibration.md: is the reference's sticky hit rate at 16 an imbalance?). CAL_SEEDS (2), WARDEN_REPLAY_PROFILE.", imposedHomes},
		{"stage-history", "what decides a carried run's 32-session stage: the policy at 16 or the stages before; every pair of policies, stages 4..32 with and without a 28 (docs/router.md addendum 3). CAL_SEEDS (2), WARDEN_REPLAY_PROFILE.", stageHistory},
	}
}

// knobs reads an exploration's settings from the environment; the first
// value that does not parse is kept in err.
type knobs struct {
	getenv func(string) string
	err    error
}

func (k *knobs) fail(err error) {
	if k.err == nil {
		k.err = err
	}
}

// floats reads a comma-separated list of numbers; def when unset.
func (k *knobs) floats(name string, def ...float64) []float64 {
	v := k.getenv(name)
	if v == "" {
		return def
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			k.fail(fmt.Errorf("%s=%s: %q is not a number (give a comma-separated list, e.g. %s=1,2)", name, v, f, name))
			return def
		}
		out = append(out, x)
	}
	return out
}

// first is the first of floats(name, def).
func (k *knobs) first(name string, def float64) float64 { return k.floats(name, def)[0] }

// policy reads a placement policy's name; def when unset.
func (k *knobs) policy(name, def string) string {
	v := k.getenv(name)
	if v == "" {
		return def
	}
	if err := place.ValidPolicy(v); err != nil {
		k.fail(fmt.Errorf("%s: %w", name, err))
	}
	return v
}

// set says the variable is set (to anything).
func (k *knobs) set(name string) bool { return k.getenv(name) != "" }

// loads returns calLoad and mixedLoad with WARDEN_REPLAY_PROFILE's profile
// when it is set.
func (k *knobs) loads() (cal, mixed func(string) replayLoad) {
	prof := k.getenv("WARDEN_REPLAY_PROFILE")
	if _, ok := model.Profiles[prof]; prof != "" && !ok {
		k.fail(fmt.Errorf("WARDEN_REPLAY_PROFILE=%s: no such simulator profile (choose one of %v)", prof, slices.Sorted(maps.Keys(model.Profiles))))
	}
	with := func(mk func(string) replayLoad) func(string) replayLoad {
		return func(pol string) replayLoad {
			l := mk(pol)
			if prof != "" {
				l.profile = prof
			}
			return l
		}
	}
	return with(calLoad), with(mixedLoad)
}

// seeds is CAL_SEEDS: how many seeds to replay each point with (default 2).
func (k *knobs) seeds() uint64 {
	n := k.first("CAL_SEEDS", 2)
	if n < 1 {
		k.fail(fmt.Errorf("CAL_SEEDS=%v: give at least 1", n))
	}
	return uint64(n)
}

var baselines = []string{place.PolicyOff, place.PolicySticky, place.PolicyAdaptive}

func explore(w io.Writer, k *knobs) error {
	cal, _ := k.loads()
	if k.err != nil {
		return k.err
	}
	for _, pol := range baselines {
		for seed := range uint64(2) {
			l := cal(pol)
			l.seed = seed
			for i, r := range l.runAll() {
				fmt.Fprintf(w, "%2d %-8s %v\n", l.stages[i], pol, r)
			}
		}
	}
	return nil
}

func sweep(w io.Writer, k *knobs) error {
	cal, mixed := k.loads()
	turnsList, moList := k.floats("SWEEP_TURNS", 2, 5), k.floats("SWEEP_MO", 0.15, 0.25, 0.35)
	if k.err != nil {
		return k.err
	}
	for _, turns := range turnsList {
		for _, mo := range moList {
			for _, mk := range []func(string) replayLoad{cal, mixed} {
				l := mk(place.PolicyAdaptive)
				l.cfg = func(c *place.Config) { c.AdmitTurns, c.MaxOverflow = turns, mo }
				for i, r := range l.runAll() {
					if l.stages[i] >= 16 {
						fmt.Fprintf(w, "%2d turns %.0f mo %.2f %v\n", l.stages[i], turns, mo, r)
					}
				}
			}
		}
	}
	return nil
}

func quantum(w io.Writer, k *knobs) error {
	cal, mixed := k.loads()
	base := k.policy("QUANTUM_POLICY", place.PolicySticky)
	slotsList, turnsList, holds := k.floats("QUANTUM_SLOTS", 3, 4), k.floats("QUANTUM_TURNS", 1, 2, 3, 6), k.floats("QUANTUM_HOLD", 0)
	anySlot := k.set("QUANTUM_ANY")
	if k.err != nil {
		return k.err
	}
	for _, mk := range []struct {
		name string
		f    func(string) replayLoad
	}{{"reference", cal}, {"mixed", mixed}} {
		for seed := range uint64(2) {
			for _, pol := range baselines {
				l := mk.f(pol)
				l.seed = seed
				for i, r := range l.runAll() {
					if l.stages[i] >= 16 {
						fmt.Fprintf(w, "%-9s seed %d %2d %-8s              %v\n", mk.name, seed, l.stages[i], pol, r)
					}
				}
			}
			for _, slots := range slotsList {
				for _, q := range turnsList {
					for _, hold := range holds {
						l := mk.f(base)
						l.seed, l.quantum, l.slots, l.anySlot = seed, int(q), int(slots), anySlot
						l.maxHold = hold
						for i, r := range l.runAll() {
							if l.stages[i] >= 16 {
								fmt.Fprintf(w, "%-9s seed %d %2d %-8s slots %d q %d hold %2.0f %v\n", mk.name, seed, l.stages[i], base, int(slots), int(q), hold, r)
							}
						}
					}
				}
			}
		}
	}
	return nil
}

func workloads(w io.Writer, k *knobs) error {
	cal, mixed := k.loads()
	if k.err != nil {
		return k.err
	}
	loads := []struct {
		name string
		mk   func(pol string) replayLoad
	}{
		{"dp8-carry-8..48", func(pol string) replayLoad {
			l := cal(pol)
			l.replicas, l.stages = 8, []int{8, 16, 32, 40, 48}
			return l
		}},
		{"long-10turns-carry", func(pol string) replayLoad {
			l := cal(pol)
			l.turns = 10
			return l
		}},
		{"mixed-carry", mixed},
	}
	for _, load := range loads {
		for _, pol := range baselines {
			l := load.mk(pol)
			for i, r := range l.runAll() {
				fmt.Fprintf(w, "%s %2d %-8s %v\n", load.name, l.stages[i], pol, r)
			}
		}
	}
	return nil
}

func scan(w io.Writer, k *knobs) error {
	cal, _ := k.loads()
	if k.err != nil {
		return k.err
	}
	for _, v := range []struct {
		name string
		mk   func(l *replayLoad)
	}{
		{"first4000", func(l *replayLoad) { l.first = 4000 }},
		{"kv48k", func(l *replayLoad) { l.kvTokens = 48000 }},
		{"turns8", func(l *replayLoad) { l.turns = 8 }},
		{"out512", func(l *replayLoad) { l.out = 512 }},
	} {
		res := map[string][]replayResult{}
		var stages []int
		for _, pol := range baselines {
			l := cal(pol)
			l.stages = []int{8, 12, 16, 20, 24}
			v.mk(&l)
			res[pol] = l.runAll()
			stages = l.stages
		}
		for i, n := range stages {
			a, s, o := res[place.PolicyAdaptive][i], res[place.PolicySticky][i], res[place.PolicyOff][i]
			win := a.p50 <= min(s.p50, o.p50) && a.p95 <= min(s.p95, o.p95) && a.outPerMin >= max(s.outPerMin, o.outPerMin) && a.hitPct >= s.hitPct
			fmt.Fprintf(w, "%-9s %2d win=%v A %.2f/%.2f/%.0f/%.1f S %.2f/%.2f/%.0f/%.1f O %.2f/%.2f/%.0f/%.1f\n", v.name, n, win,
				a.p50, a.p95, a.outPerMin, a.hitPct, s.p50, s.p95, s.outPerMin, s.hitPct, o.p50, o.p95, o.outPerMin, o.hitPct)
		}
	}
	return nil
}

// calibrate's points are relative to the physical profile
// (docs/reference-rig.md): prefill x1 is its 130 µs/token.
func calibrate(w io.Writer, k *knobs) error {
	prefills, kvs, gbpss, rtts := k.floats("CAL_PREFILL", 1, 1.5, 2), k.floats("CAL_KV", 40000, 44000), k.floats("CAL_GBPS", 310, 360), k.floats("CAL_RTT", 0.25)
	seeds := k.seeds()
	if k.err != nil {
		return k.err
	}
	for _, f := range prefills {
		for _, kv := range kvs {
			for _, gbps := range gbpss {
				for _, rtt := range rtts {
					for seed := range seeds {
						run := func(pol string) []replayResult {
							l := calLoad(pol)
							l.profile, l.seed, l.kvTokens, l.rtt = model.DefaultProfile, seed, int(kv), rtt
							l.tune = retune(f, gbps)
							return l.runAll()
						}
						off, on := run(place.PolicyOff), run(place.PolicySticky)
						hit, sign, out := calScore(off, on)
						var b strings.Builder
						for i, r := range referenceTable {
							fmt.Fprintf(&b, "\n   %2d hit %4.1f→%4.1f (%4.1f→%4.1f) p50 %5.2f→%5.2f (%5.2f→%5.2f) p95 %5.1f→%5.1f (%5.1f→%5.1f) out %5.0f→%5.0f (%5.0f→%5.0f)",
								r.sessions, off[i].hitPct, on[i].hitPct, r.hitOff, r.hitOn, off[i].p50, on[i].p50, r.p50Off, r.p50On,
								off[i].p95, on[i].p95, r.p95Off, r.p95On, off[i].outPerMin, on[i].outPerMin, r.outOff, r.outOn)
						}
						fmt.Fprintf(w, "prefill×%.2f kv %.0f %3.0f GB/s rtt %.2f seed %d: hit %d/10 sign %d/5 out %d/10 ttfb-err %.2f%s\n",
							f, kv, gbps, rtt, seed, hit, sign, out, ttfbErr(off, on), b.String())
					}
				}
			}
		}
	}
	return nil
}

func routerVerdict(w io.Writer, k *knobs) error {
	cal, mixed := k.loads()
	stages := []int{4, 8, 16, 24, 32}
	if st := k.floats("CAL_STAGES"); st != nil {
		stages = stages[:0]
		for _, n := range st {
			stages = append(stages, int(n))
		}
	}
	third := k.policy("CAL_THIRD", place.PolicyAdaptive)
	slack := 0.0 // place.DefaultAdmitSlack
	if v := k.floats("CAL_SLACK"); v != nil {
		slack = v[0]
		if slack == 0 {
			slack = -1 // none (Config.AdmitSlack < 0)
		}
	}
	kv, fill := k.floats("CAL_KV"), k.floats("CAL_FILL")
	prefill, gbps := k.first("CAL_PREFILL", 1), k.first("CAL_GBPS", 0)
	mixedLengths, perReplica := k.set("CAL_MIXED"), k.set("CAL_REPLICAS")
	seeds := k.seeds()
	if k.err != nil {
		return k.err
	}
	for seed := range seeds {
		run := func(pol string) []replayResult {
			l := cal(pol)
			l.seed, l.stages = seed, stages
			if kv != nil {
				l.kvTokens = int(kv[0])
			}
			f := 0.0
			if fill != nil && pol == third {
				f = fill[0]
			}
			l.cfg = func(c *place.Config) { c.Fill, c.AdmitSlack = f, slack }
			if mixedLengths {
				l.firstOf = mixed(pol).firstOf
			}
			l.tune = retune(prefill, gbps)
			return l.runAll()
		}
		off, on, ad := run(place.PolicyOff), run(place.PolicySticky), run(third)
		mark := func(ok bool) string {
			if ok {
				return "✓"
			}
			return "✗"
		}
		for i, n := range stages {
			fmt.Fprintf(w, "seed %d %2d p50 %5.2f/%5.2f/%5.2f %s  p95 %5.1f/%5.1f/%5.1f %s  out %5.0f/%5.0f/%5.0f %s  hit %4.1f/%4.1f/%4.1f %s  moves %d waited %d\n",
				seed, n,
				off[i].p50, on[i].p50, ad[i].p50, mark(ad[i].p50 <= min(off[i].p50, on[i].p50)),
				off[i].p95, on[i].p95, ad[i].p95, mark(ad[i].p95 <= min(off[i].p95, on[i].p95)),
				off[i].outPerMin, on[i].outPerMin, ad[i].outPerMin, mark(ad[i].outPerMin >= max(off[i].outPerMin, on[i].outPerMin)),
				off[i].hitPct, on[i].hitPct, ad[i].hitPct, mark(ad[i].hitPct >= on[i].hitPct), ad[i].moves, ad[i].waited)
			if perReplica {
				for j, x := range [][]replayResult{off, on, ad} {
					fmt.Fprintf(w, "      %-8s wait/replica %.1f  running %.2f waiting %.2f  reprefill %dk preempt %d turns %d\n",
						[]string{"off", "sticky", third}[j], x[i].repWait, x[i].running, x[i].waiting, x[i].reprefill/1000, x[i].preempt, x[i].turns)
				}
			}
		}
	}
	return nil
}

// imposedHomes imposes homes per worker slot, so that a finished session's
// replacement lands where it did.
func imposedHomes(w io.Writer, k *knobs) error {
	cal, _ := k.loads()
	seeds := k.seeds()
	if k.err != nil {
		return k.err
	}
	for _, spread := range [][]int{{4, 4, 4, 4}, {5, 4, 4, 3}, {6, 5, 3, 2}, {6, 6, 3, 1}, {6, 5, 5, 0}, {8, 4, 4, 0}} {
		var slots []int
		for r, n := range spread {
			for range n {
				slots = append(slots, r)
			}
		}
		for seed := range seeds {
			l := cal(place.PolicySticky)
			l.seed, l.stages = seed, []int{16, 16, 16}
			l.home = func(w int) int { return slots[w%len(slots)] }
			rs := l.runAll()
			r := rs[len(rs)-1]
			fmt.Fprintf(w, "homes %v seed %d: hit %.1f%% busy %.2f p50 %.2f p95 %.1f out %.0f\n",
				spread, seed, r.hitPct, r.busy, r.p50, r.p95, r.outPerMin)
		}
	}
	return nil
}

// stageHistory prints the 32-session row with the number of first turns
// in the window (a conversation's first turn computes its 7.3k unique
// tokens; a thrashed follow-up re-computes 8-10.5k) and the mean computed
// prompt tokens per turn.
func stageHistory(w io.Writer, k *knobs) error {
	cal, _ := k.loads()
	seeds := k.seeds()
	if k.err != nil {
		return k.err
	}
	for _, stages := range [][]int{{4, 8, 16, 24, 32}, {4, 8, 16, 24, 28, 32}} {
		for _, at16 := range baselines {
			for _, rest := range baselines {
				for seed := range seeds {
					l := cal(rest)
					l.seed, l.stages = seed, stages
					l.stagePolicy = make([]string, len(stages))
					for i, n := range stages {
						l.stagePolicy[i] = rest
						if n == 16 {
							l.stagePolicy[i] = at16
						}
					}
					r := l.runAll()[len(stages)-1]
					fmt.Fprintf(w, "stages %v  16: %-8s rest: %-8s seed %d  32: p50 %5.2f p95 %4.1f out %5.0f hit %4.1f  turns %d first turns %d computed/turn %.1fk\n",
						stages, at16, rest, seed, r.p50, r.p95, r.outPerMin, r.hitPct, r.turns, r.firstTurns, float64(r.computed)/float64(max(r.turns, 1))/1000)
				}
			}
		}
	}
	return nil
}
