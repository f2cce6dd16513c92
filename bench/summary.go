package bench

import (
	"math"
	"slices"
)

// StageSummary is one row of the reference table for one variant. Times and
// rates are in simulated time. Pointer fields are nil when unknown (no
// sample, or a bare engine without the warden's replica header).
type StageSummary struct {
	Variant  string  `json:"variant"` // warden policy, "" when no A/B
	Sessions int     `json:"sessions"`
	Seconds  float64 `json:"seconds"` // stage length

	Turns            int `json:"turns"`             // turns finished within the stage
	SessionsFinished int `json:"sessions_finished"` // sessions whose last turn finished within the stage
	SessionsStarted  int `json:"sessions_started"`
	Errors           int `json:"errors"`
	Canceled         int `json:"canceled_turns"` // ended by the bench (Ctrl-C, the drain's end), not failed: not in Errors
	Late             int `json:"late_turns"`     // finished outside the measured window: warm-up, or after the end (not counted)

	SessionsPerHour float64  `json:"sessions_per_hour"`
	OutputPerMin    float64  `json:"output_tokens_per_min"`
	TTFBP50         *float64 `json:"ttfb_p50_s,omitempty"`
	TTFBP95         *float64 `json:"ttfb_p95_s,omitempty"`
	ReplicasBusy    *float64 `json:"replicas_busy,omitempty"`
	PrefixHitPct    *float64 `json:"prefix_hit_pct,omitempty"`
	// HostHitPct is the share of prompt tokens found in the engines' host KV
	// tier (vLLM's external prefix-cache hits over the same queries); nil
	// without a tier. PrefixHitPct counts the GPU cache only.
	HostHitPct *float64 `json:"host_hit_pct,omitempty"`
	StayedPct  *float64 `json:"stayed_pct,omitempty"`

	OutputTokens    int      `json:"output_tokens"`
	PromptTokens    int      `json:"prompt_tokens"`     // usage reports
	CachedTokens    int      `json:"cached_tokens"`     // usage reports
	PrefixHits      float64  `json:"prefix_hits"`       // engine counter delta
	PrefixQueries   float64  `json:"prefix_queries"`    // engine counter delta
	BusyPolls       int      `json:"busy_polls"`        // status polls averaged into ReplicasBusy
	MeanPromptFirst *float64 `json:"mean_prompt_first"` // usage prompt tokens of first turns (size check)

	// Subagents (--subagents): their turns are counted in Turns, the token
	// sums, the rates and TTFB, but not in SessionsFinished, StayedPct or
	// MeanPromptFirst. SubagentStayedPct is the share of their turns served
	// by the parent's first replica.
	SubagentTurns     int      `json:"subagent_turns,omitempty"`
	SubagentStayedPct *float64 `json:"subagent_stayed_pct,omitempty"`

	// Engine load over the stage, for explaining the columns above:
	// running and waiting requests summed over the replicas, averaged over
	// the polls, and engine preemptions (counter delta).
	RunningMean *float64 `json:"running_mean,omitempty"`
	WaitingMean *float64 `json:"waiting_mean,omitempty"`
	Preemptions *float64 `json:"preemptions,omitempty"`

	// The bench's own lag over the measured window (lag.go): how late a
	// heartbeat timer of 10 ms (wall time) woke, in simulated seconds like
	// the TTFB it adds to. LagWarning is set when the TTFB p95 is within
	// lagWarnMultiple of BenchLagP99: the client may set the tail.
	BenchLagP50 *float64 `json:"bench_lag_p50_s,omitempty"`
	BenchLagP99 *float64 `json:"bench_lag_p99_s,omitempty"`
	BenchLagMax *float64 `json:"bench_lag_max_s,omitempty"`
	LagWarning  string   `json:"lag_warning,omitempty"`
}

// addEngineStats fills the engine-load fields from the stage's polls and
// the counter samples around it (countersOK: both samples were read).
func (s *StageSummary) addEngineStats(polls []pollStat, before, after sample, countersOK bool) {
	if len(polls) > 0 {
		var run, wait float64
		for _, p := range polls {
			run += p.Running
			wait += p.Waiting
		}
		s.RunningMean, s.WaitingMean = ptr(run/float64(len(polls))), ptr(wait/float64(len(polls)))
	}
	if n, ok := preemptDelta(before, after); ok && countersOK && after != nil {
		s.Preemptions = ptr(n)
	}
}

// busyCounts lists each poll's busy replicas.
func busyCounts(polls []pollStat) []int {
	out := make([]int, len(polls))
	for i, p := range polls {
		out[i] = p.Busy
	}
	return out
}

func ptr(v float64) *float64 { return &v }

// summarize computes a stage's row from its turns (already in simulated
// time), the busy-replica polls and the prefix-counter deltas.
func summarize(variant string, sessions int, seconds float64, turns []TurnRecord, busy []int,
	hits, queries float64, countersOK bool) StageSummary {
	s := StageSummary{Variant: variant, Sessions: sessions, Seconds: seconds, BusyPolls: len(busy)}
	var ttfb []float64
	stayed, followups := 0, 0
	subStayed, subPlaced := 0, 0
	firstPrompt, firsts := 0, 0
	started := map[int]bool{}
	for _, t := range turns {
		started[t.Session] = true
		switch {
		case t.Error != "" && t.Canceled:
			s.Canceled++
		case t.Error != "" && t.InStage:
			s.Errors++
		}
		if !t.InStage || t.Error != "" {
			s.Late += btoi(!t.InStage)
			continue
		}
		s.Turns++
		s.OutputTokens += t.OutputTokens
		s.PromptTokens += t.PromptTokens
		s.CachedTokens += t.CachedTokens
		s.SessionsFinished += btoi(t.LastTurn && !t.Subagent)
		s.SubagentTurns += btoi(t.Subagent)
		if t.TTFBS >= 0 {
			ttfb = append(ttfb, t.TTFBS)
		}
		switch {
		case t.Stayed != nil && t.Subagent:
			subPlaced++
			subStayed += btoi(*t.Stayed)
		case t.Stayed != nil:
			followups++
			stayed += btoi(*t.Stayed)
		}
		if t.Turn == 1 && !t.Subagent && t.PromptTokens > 0 {
			firstPrompt += t.PromptTokens
			firsts++
		}
	}
	s.SessionsStarted = len(started)
	if seconds > 0 {
		s.SessionsPerHour = float64(s.SessionsFinished) * 3600 / seconds
		s.OutputPerMin = float64(s.OutputTokens) * 60 / seconds
	}
	if len(ttfb) > 0 {
		slices.Sort(ttfb)
		s.TTFBP50, s.TTFBP95 = ptr(quantile(ttfb, 0.50)), ptr(quantile(ttfb, 0.95))
	}
	if len(busy) > 0 {
		s.ReplicasBusy = ptr(float64(sumInts(busy)) / float64(len(busy)))
	}
	if countersOK {
		s.PrefixHits, s.PrefixQueries = hits, queries
		if queries > 0 {
			s.PrefixHitPct = ptr(100 * hits / queries)
		}
	}
	if followups > 0 {
		s.StayedPct = ptr(100 * float64(stayed) / float64(followups))
	}
	if subPlaced > 0 {
		s.SubagentStayedPct = ptr(100 * float64(subStayed) / float64(subPlaced))
	}
	if firsts > 0 {
		s.MeanPromptFirst = ptr(float64(firstPrompt) / float64(firsts))
	}
	return s
}

func sumInts(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// quantile of sorted xs by linear interpolation between closest ranks
// (numpy's default); xs must be non-empty.
func quantile(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	return xs[lo] + (pos-float64(lo))*(xs[hi]-xs[lo])
}
