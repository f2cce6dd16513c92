package replay

import (
	"fmt"
	"math"

	"github.com/lmwarden/warden/sim/model"
)

// refLoad is the reference measurement's load (docs/reference-rig.md): 4
// replicas, a 3.5k shared system prompt, a 7.3k unique first message (±150),
// 5 follow-ups of 400 new tokens, 256 output tokens a turn, one 3-minute
// stage of sessions, scraped every 10 s, the balancers refreshed every
// second; on the simulator's default (physical) profile.
func refLoad(policy string, sessions int) replayLoad {
	return replayLoad{replicas: 4, sessions: sessions, system: 3500, first: 7300, turn: 400, out: 256, turns: 5,
		stage: 180, scrape: 10, refresh: 1, policy: policy, jitter: 150}
}

// calLoad is the calibrated reference (docs/calibration.md): the -fit
// profile, one pool of sessions carried over stages 4..32, 250 ms client
// round trip. The explorations put WARDEN_REPLAY_PROFILE's profile in its
// place when it is set (knobs.cal).
func calLoad(policy string) replayLoad {
	l := refLoad(policy, 0)
	l.stages, l.rtt, l.profile = []int{4, 8, 16, 24, 32}, 0.25, model.ReferenceProfile
	return l
}

// mixedLoad is the calibrated reference with mixed session lengths: a
// third each of short (2k first message, 10 follow-ups), reference (7.3k,
// 5) and long (15k, 3) conversations.
func mixedLoad(pol string) replayLoad {
	l := calLoad(pol)
	l.firstOf = func(k int) (int, int) { return []int{2000, 7300, 15000}[k%3], []int{10, 5, 3}[k%3] }
	return l
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
