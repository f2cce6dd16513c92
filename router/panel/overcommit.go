package panel

import (
	"fmt"
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
func Overcommit(s Status) (msg string, over bool) {
	p, ok := loadOf(s)
	if !ok || !p.over() {
		return "", false
	}
	return p.message("KV cache overcommitted"), true
}

// UpdatePeak returns the worse of prev and the current overcommit of s (the
// one with the larger demand/capacity ratio), stamped with s.Now; prev
// itself when s is not overcommitted. prev may be nil. The proxy calls it on
// every snapshot and stores the result in Status.PeakOvercommit, so that the
// exit summary can say that the run was overcommitted even if it no longer
// is at exit.
func UpdatePeak(prev *OvercommitPeak, s Status) *OvercommitPeak {
	cur, ok := loadOf(s)
	if !ok || !cur.over() {
		return prev
	}
	if prev != nil && prev.ratio() >= cur.ratio() {
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
func loadOf(s Status) (OvercommitPeak, bool) {
	capTok := totalCapacity(s)
	n, window := s.Sessions, 0.0
	if s.ConcurrentSessions > 0 {
		n, window = s.ConcurrentSessions, s.ActiveWindowSeconds
	}
	if n <= 0 || s.ActiveContextSessions <= 0 || s.ActiveContextTokens == 0 || capTok <= 0 {
		return OvercommitPeak{}, false
	}
	mean := int(s.ActiveContextTokens / uint64(s.ActiveContextSessions))
	p := OvercommitPeak{At: s.Now, Sessions: n, WindowSeconds: window, MeanContextTokens: mean, CapacityTokens: capTok}
	if s.Engines != nil {
		p.Hint = s.Engines.OffloadHint
	}
	return p, true
}

// demand is sessions x mean context, in tokens.
func (p OvercommitPeak) demand() int { return p.Sessions * p.MeanContextTokens }

func (p OvercommitPeak) over() bool { return p.CapacityTokens > 0 && p.demand() > p.CapacityTokens }

func (p OvercommitPeak) ratio() float64 {
	return ratio(float64(p.demand()), float64(p.CapacityTokens))
}

// fits is how many sessions of the mean context the KV cache holds.
func (p OvercommitPeak) fits() int {
	if p.MeanContextTokens <= 0 {
		return 0
	}
	return p.CapacityTokens / p.MeanContextTokens
}

// sessions says what Sessions counts: the sessions with a turn within the
// active window (finished conversations too, until the window passes) when
// the window is known.
func (p OvercommitPeak) sessions() string {
	if p.WindowSeconds > 0 {
		return fmt.Sprintf("%s with a turn in the last %s", count(p.Sessions, "session"),
			fmtDuration(time.Duration(p.WindowSeconds*float64(time.Second))))
	}
	return fmt.Sprintf("%d active sessions", p.Sessions)
}

// message states the numbers and the remedy, after a lead-in.
func (p OvercommitPeak) message(lead string) string {
	return fmt.Sprintf("%s: %s x %s tokens mean context = %s tokens > %s tokens "+
		"of KV cache on all replicas; conversations evict each other's prefixes and are prefilled again. "+
		"Keep at most %d conversations going at once, or add replicas.%s",
		lead, p.sessions(), fmtTokens(float64(p.MeanContextTokens)), fmtTokens(float64(p.demand())),
		fmtTokens(float64(p.CapacityTokens)), p.fits(), p.hint())
}

func (p OvercommitPeak) hint() string {
	if p.Hint == "" {
		return ""
	}
	return " " + p.Hint
}

// peakLine is the one-line note on the panel about a past overcommit.
func (p OvercommitPeak) peakLine() string {
	return fmt.Sprintf("KV cache overcommitted earlier (worst at %s): %s x %s = %s > %s tokens",
		p.At.Local().Format("15:04:05"), p.sessions(), fmtTokens(float64(p.MeanContextTokens)),
		fmtTokens(float64(p.demand())), fmtTokens(float64(p.CapacityTokens)))
}
