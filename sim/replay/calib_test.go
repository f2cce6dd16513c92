package replay

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/sim/model"
)

// refRow is one stage of the reference measurement (docs/reference-rig.md), off and on.
type refRow struct {
	sessions      int
	outOff, outOn float64
	p50Off, p50On float64
	p95Off, p95On float64
	hitOff, hitOn float64
}

var referenceTable = []refRow{
	{4, 5886, 6744, 2.05, 0.38, 3.5, 2.84, 56.2, 86.4},
	{8, 8364, 10752, 2.33, 0.48, 6.32, 5.03, 44.3, 86.1},
	{16, 9558, 12204, 3.25, 0.85, 26.24, 24.88, 33.2, 48.6},
	{24, 9048, 11178, 5.06, 13.14, 58.82, 38.34, 32.8, 37.9},
	{32, 14760, 16638, 12.32, 27.66, 82.84, 38.92, 31.6, 31.6},
}

// calScore counts the issue-6 targets met by one off and one sticky replay
// of the five reference stages: hit % within 8 points (10 cells), the sign
// of the p50 difference (5), output within 25 % (10).
func calScore(off, on []replayResult) (hit, sign, out int) {
	for i, r := range referenceTable {
		if math.Abs(off[i].hitPct-r.hitOff) <= 8 {
			hit++
		}
		if math.Abs(on[i].hitPct-r.hitOn) <= 8 {
			hit++
		}
		if (on[i].p50 < off[i].p50) == (r.p50On < r.p50Off) {
			sign++
		}
		if math.Abs(off[i].outPerMin/r.outOff-1) <= 0.25 {
			out++
		}
		if math.Abs(on[i].outPerMin/r.outOn-1) <= 0.25 {
			out++
		}
	}
	return hit, sign, out
}

// ttfbErr is the mean |ln(sim/reference)| of the TTFB p50 and p95 of both
// variants at 4, 8 and 16 sessions, where the reference is not overloaded:
// how well the sim's prefill and queueing times match, as one number.
func ttfbErr(off, on []replayResult) float64 {
	var sum float64
	n := 0
	for i, r := range referenceTable[:3] {
		for _, p := range [][2]float64{{off[i].p50, r.p50Off}, {on[i].p50, r.p50On}, {off[i].p95, r.p95Off}, {on[i].p95, r.p95On}} {
			sum += math.Abs(math.Log(p[0] / p[1]))
			n++
		}
	}
	return sum / float64(n)
}

func envFloats(name string, def ...float64) []float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			panic(err)
		}
		out = append(out, x)
	}
	return out
}

// retune scales a profile's prefill cost by f and sets its decode bandwidth
// to gbps (0: unchanged).
func retune(f, gbps float64) func(*model.Profile) {
	return func(p *model.Profile) {
		p.A, p.B = p.A*f, p.B*f
		if gbps > 0 {
			p.DecodeGBps = gbps
		}
	}
}

// TestReplayCalibrate sweeps the simulator's uncertain profile numbers
// (prefill speed, KV capacity, decode bandwidth) on the calibrated bench
// load and scores each point against the reference table (docs/calibration.md).
// The points are relative to the physical profile (docs/reference-rig.md):
// prefill ×1 is its 130 µs/token.
// WARDEN_REPLAY=1 CAL_PREFILL=1,2 CAL_KV=40000 CAL_GBPS=310 go test -run TestReplayCalibrate -v ./sim/replay/
func TestReplayCalibrate(t *testing.T) {
	exploring(t)
	for _, f := range envFloats("CAL_PREFILL", 1, 1.5, 2) {
		for _, kv := range envFloats("CAL_KV", 40000, 44000) {
			for _, gbps := range envFloats("CAL_GBPS", 310, 360) {
				for _, rtt := range envFloats("CAL_RTT", 0.25) {
					for seed := range uint64(envFloats("CAL_SEEDS", 2)[0]) {
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
						t.Logf("prefill×%.2f kv %.0f %3.0f GB/s rtt %.2f seed %d: hit %d/10 sign %d/5 out %d/10 ttfb-err %.2f%s",
							f, kv, gbps, rtt, seed, hit, sign, out, ttfbErr(off, on), b.String())
					}
				}
			}
		}
	}
}

// TestReplayRouterVerdict replays off, sticky and adaptive (or CAL_THIRD) on
// the calibrated load (CAL_PREFILL, CAL_KV, CAL_GBPS change the profile when
// set; CAL_STAGES replaces the stage list) and marks, per stage and seed,
// whether the third policy is at or better than the better baseline: p50,
// p95 and output against the better of off and sticky, hits against sticky.
// CAL_REPLICAS=1 adds per-replica waits and the engines' mean running and
// waiting requests; CAL_FILL sets the third policy's KV fill (--kv-fill),
// CAL_SLACK the adaptive admission slack; CAL_MIXED=1 replays the mixed
// session lengths instead.
func TestReplayRouterVerdict(t *testing.T) {
	exploring(t)
	stages := []int{4, 8, 16, 24, 32}
	if st := envFloats("CAL_STAGES"); st != nil {
		stages = stages[:0]
		for _, n := range st {
			stages = append(stages, int(n))
		}
	}
	third := place.PolicyAdaptive
	if v := os.Getenv("CAL_THIRD"); v != "" {
		third = v
	}
	slack := 0.0 // place.DefaultAdmitSlack
	if v := envFloats("CAL_SLACK"); v != nil {
		slack = v[0]
		if slack == 0 {
			slack = -1 // none (Config.AdmitSlack < 0)
		}
	}
	for seed := range uint64(envFloats("CAL_SEEDS", 2)[0]) {
		run := func(pol string) []replayResult {
			l := calLoad(pol)
			l.seed, l.stages = seed, stages
			if kv := envFloats("CAL_KV"); kv != nil {
				l.kvTokens = int(kv[0])
			}
			fill := 0.0
			if f := envFloats("CAL_FILL"); f != nil && pol == third {
				fill = f[0]
			}
			l.cfg = func(c *place.Config) { c.Fill, c.AdmitSlack = fill, slack }
			if os.Getenv("CAL_MIXED") != "" {
				l.firstOf = mixedLoad(pol).firstOf
			}
			l.tune = retune(envFloats("CAL_PREFILL", 1)[0], envFloats("CAL_GBPS", 0)[0])
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
			t.Logf("seed %d %2d p50 %5.2f/%5.2f/%5.2f %s  p95 %5.1f/%5.1f/%5.1f %s  out %5.0f/%5.0f/%5.0f %s  hit %4.1f/%4.1f/%4.1f %s  moves %d waited %d",
				seed, n,
				off[i].p50, on[i].p50, ad[i].p50, mark(ad[i].p50 <= min(off[i].p50, on[i].p50)),
				off[i].p95, on[i].p95, ad[i].p95, mark(ad[i].p95 <= min(off[i].p95, on[i].p95)),
				off[i].outPerMin, on[i].outPerMin, ad[i].outPerMin, mark(ad[i].outPerMin >= max(off[i].outPerMin, on[i].outPerMin)),
				off[i].hitPct, on[i].hitPct, ad[i].hitPct, mark(ad[i].hitPct >= on[i].hitPct), ad[i].moves, ad[i].waited)
			if os.Getenv("CAL_REPLICAS") != "" {
				for j, x := range [][]replayResult{off, on, ad} {
					t.Logf("      %-8s wait/replica %.1f  running %.2f waiting %.2f  reprefill %dk preempt %d turns %d",
						[]string{"off", "sticky", third}[j], x[i].repWait, x[i].running, x[i].waiting, x[i].reprefill/1000, x[i].preempt, x[i].turns)
				}
			}
		}
	}
}

// TestReplayImposedHomes replays sticky at 16 sessions with the homes of
// the sessions imposed (per worker slot, so a finished session's
// replacement lands where it did): balanced 4/4/4/4 against unbalanced
// spreads, for docs/calibration.md's question whether the reference's
// sticky hit rate at 16 (48.6 %, 3.69 replicas busy) is an imbalance.
func TestReplayImposedHomes(t *testing.T) {
	exploring(t)
	for _, spread := range [][]int{{4, 4, 4, 4}, {5, 4, 4, 3}, {6, 5, 3, 2}, {6, 6, 3, 1}, {6, 5, 5, 0}, {8, 4, 4, 0}} {
		var slots []int
		for r, n := range spread {
			for range n {
				slots = append(slots, r)
			}
		}
		for seed := range uint64(envFloats("CAL_SEEDS", 2)[0]) {
			l := calLoad(place.PolicySticky)
			l.seed, l.stages = seed, []int{16, 16, 16}
			l.home = func(w int) int { return slots[w%len(slots)] }
			rs := l.runAll()
			r := rs[len(rs)-1]
			t.Logf("homes %v seed %d: hit %.1f%% busy %.2f p50 %.2f p95 %.1f out %.0f",
				spread, seed, r.hitPct, r.busy, r.p50, r.p95, r.outPerMin)
		}
	}
}

// TestReplayStageHistory asks what decides the carried run's last stage:
// the policy that places it, or the stages before. Each variant runs one
// policy at 16 sessions and another at every other stage; the stage list
// is the reference's (4, 8, 16, 24, 32) or the same with a 28-session stage
// inserted. It prints the 32-session row with the number of first turns
// in the window (a conversation's first turn computes its 7.3k unique
// tokens; a thrashed follow-up re-computes 8-10.5k) and the mean computed
// prompt tokens per turn (docs/router.md addendum 3).
func TestReplayStageHistory(t *testing.T) {
	exploring(t)
	pols := []string{place.PolicyOff, place.PolicySticky, place.PolicyAdaptive}
	for _, stages := range [][]int{{4, 8, 16, 24, 32}, {4, 8, 16, 24, 28, 32}} {
		for _, at16 := range pols {
			for _, rest := range pols {
				for seed := range uint64(envFloats("CAL_SEEDS", 2)[0]) {
					l := calLoad(rest)
					l.seed, l.stages = seed, stages
					l.stagePolicy = make([]string, len(stages))
					for i, n := range stages {
						l.stagePolicy[i] = rest
						if n == 16 {
							l.stagePolicy[i] = at16
						}
					}
					r := l.runAll()[len(stages)-1]
					t.Logf("stages %v  16: %-8s rest: %-8s seed %d  32: p50 %5.2f p95 %4.1f out %5.0f hit %4.1f  turns %d first turns %d computed/turn %.1fk",
						stages, at16, rest, seed, r.p50, r.p95, r.outPerMin, r.hitPct, r.turns, r.firstTurns, float64(r.computed)/float64(max(r.turns, 1))/1000)
				}
			}
		}
	}
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
