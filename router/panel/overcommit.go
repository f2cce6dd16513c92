package panel

import (
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"time"
)

// Overcommit reports whether the active conversations need more KV cache
// than all replicas together have: active sessions (ConcurrentSessions if
// set, else Sessions) x their mean context >
// total KV capacity (the rule of thumb from the field: past that point
// conversations evict each other's prefixes and the cached share falls).
// msg names the numbers and what to do; it is "" when over is false, which
// includes every case where a number is unknown (no sessions with a known
// context, no KV capacity scraped yet).
func Overcommit(s schema.Status) (msg string, over bool) {
	p, ok := loadOf(s)
	if !ok || !peakOver(p) {
		return "", false
	}
	return peakMessage(p, "KV cache overcommitted"), true
}

// UpdatePeak returns the worse of prev and the current overcommit of s (the
// one with the larger demand/capacity ratio), stamped with s.Now; prev
// itself when s is not overcommitted. prev may be nil. The core calls it on
// every snapshot and stores the result in Status.PeakOvercommit, so that the
// exit summary can say that the run was overcommitted even if it no longer
// is at exit.
func UpdatePeak(prev *schema.OvercommitPeak, s schema.Status) *schema.OvercommitPeak {
	cur, ok := loadOf(s)
	if !ok || !peakOver(cur) {
		return prev
	}
	if prev != nil && peakRatio(*prev) >= peakRatio(cur) {
		return prev
	}
	cur.At = s.Now
	if cur.At.IsZero() {
		cur.At = time.Now()
	}
	return &cur
}

// loadOf measures the demand on the KV cache in s; ok is false when a
// number is unknown.
func loadOf(s schema.Status) (schema.OvercommitPeak, bool) {
	capTok := totalCapacity(s)
	n, window := s.Sessions, 0.0
	if s.ConcurrentSessions > 0 {
		n, window = s.ConcurrentSessions, s.ActiveWindowSeconds
	}
	if n <= 0 || s.ActiveContextSessions <= 0 || s.ActiveContextTokens == 0 || capTok <= 0 {
		return schema.OvercommitPeak{}, false
	}
	mean := int(s.ActiveContextTokens / uint64(s.ActiveContextSessions))
	p := schema.OvercommitPeak{At: s.Now, Sessions: n, WindowSeconds: window, MeanContextTokens: mean, CapacityTokens: capTok}
	if s.Engines != nil {
		p.Hint = s.Engines.OffloadHint
	}
	return p, true
}

// demand is sessions x mean context, in tokens.
func peakDemand(p schema.OvercommitPeak) int { return p.Sessions * p.MeanContextTokens }

func peakOver(p schema.OvercommitPeak) bool {
	return p.CapacityTokens > 0 && peakDemand(p) > p.CapacityTokens
}

func peakRatio(p schema.OvercommitPeak) float64 {
	return ratio(float64(peakDemand(p)), float64(p.CapacityTokens))
}

// fits is how many sessions of the mean context the KV cache holds.
func peakFits(p schema.OvercommitPeak) int {
	if p.MeanContextTokens <= 0 {
		return 0
	}
	return p.CapacityTokens / p.MeanContextTokens
}

// peakSessions says what Sessions counts: the sessions with a turn within
// the active window (finished conversations too, until the window passes)
// when the window is known.
func peakSessions(p schema.OvercommitPeak) string {
	if p.WindowSeconds > 0 {
		return fmt.Sprintf("%s with a turn in the last %s", count(p.Sessions, "session"),
			fmtDuration(time.Duration(p.WindowSeconds*float64(time.Second))))
	}
	return fmt.Sprintf("%d active sessions", p.Sessions)
}

// message states the numbers and the remedy, after a lead-in.
func peakMessage(p schema.OvercommitPeak, lead string) string {
	return fmt.Sprintf("%s: %s x %s tokens mean context = %s tokens > %s tokens "+
		"of KV cache on all replicas; conversations evict each other's prefixes and are prefilled again. "+
		"Keep at most %d conversations going at once, or add replicas.%s",
		lead, peakSessions(p), fmtTokens(float64(p.MeanContextTokens)), fmtTokens(float64(peakDemand(p))),
		fmtTokens(float64(p.CapacityTokens)), peakFits(p), peakHint(p))
}

func peakHint(p schema.OvercommitPeak) string {
	if p.Hint == "" {
		return ""
	}
	return " " + p.Hint
}

// peakLine is the one-line note on the panel about a past overcommit.
func peakLine(p schema.OvercommitPeak) string {
	return fmt.Sprintf("KV cache overcommitted earlier (worst at %s): %s x %s = %s > %s tokens",
		p.At.Local().Format("15:04:05"), peakSessions(p), fmtTokens(float64(p.MeanContextTokens)),
		fmtTokens(float64(peakDemand(p))), fmtTokens(float64(p.CapacityTokens)))
}
