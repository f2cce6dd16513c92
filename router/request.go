package router

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/ledger"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/tap"
)

// One request's life in the core, as every data plane drives it:
//
//	Identify (which conversation) → Place (a replica, or held, or none)
//	→ the data plane carries the bytes → Finish (the outcome accounted).
//
// Place counts the request in flight on its replica; Finish, called once
// for every placement with a replica, takes it out again.

// Identify is the session key of a request: its headers and the body's
// top-level fields (identity.Scan), the same for every data plane. The
// key's Key is the placement key (a subagent's own unless
// SubagentsWithParent).
func (c *Core) Identify(h http.Header, f identity.Fields) identity.SessionKey {
	k := identity.ExtractFrom(h, f, c.cfg.SessionHeaders)
	k.Key = k.Conversation(c.cfg.SubagentsWithParent)
	return k
}

// PlaceRequest is the placement request of an identified request; pinned
// and pin are the client's X-Warden-Replica (identity.ParsePin).
func (c *Core) PlaceRequest(k identity.SessionKey, pinned bool, pin, bodyBytes int) place.Request {
	return place.Request{Key: k.Key, Subagent: k.Subagent && (k.Agent == "" || !c.cfg.SubagentsWithParent),
		Pinned: pinned, Pin: pin, BodyBytes: bodyBytes}
}

// Place decides where a request goes, holding it while the policy says so
// (until ctx ends). A placement with Rank >= 0 is in flight on its Replica
// until Finish; Rank < 0 has nowhere to go (Reason says why: ReasonWait
// when ctx ended while held).
func (c *Core) Place(ctx context.Context, req place.Request) Placement {
	label := ledger.Label(req.Key)
	req.Resident = c.residency(label)
	pl := c.placer.Place(ctx, req)
	if pl.Rank >= 0 {
		c.metrics.inFlight.Inc()
		c.noteTruth(&pl, label)
	}
	return pl
}

// Outcome is what a data plane saw of one placed request.
type Outcome struct {
	// Retry: the request never reached the engine (a refused dial, a
	// kept-alive connection closed before any response byte); the data
	// plane places it again elsewhere. Nothing else is counted.
	Retry bool
	// NoEndpoint: the engine has no such endpoint (404 for a path the
	// warden does not know); the request is not a turn and only ends.
	NoEndpoint bool
	// Status is the HTTP status the client got (499: the client went
	// away; a stream that broke off after its headers: 502).
	Status int
	// Cause says why the attempt failed, for the replica's failure streak
	// ("" when it did not).
	Cause string
	// Usage is what the engine reported (tap.Tap.Usage).
	Usage tap.Usage
	// FirstByte is when the engine's first answer byte came; FirstToken
	// when its first content came (tap.Tap.FirstToken: not a role-only
	// chunk or headers); zero if none. The time to first token is what
	// placement learns from and the decision log records.
	FirstByte, FirstToken time.Time
	// Start is when the request arrived.
	Start time.Time
	// Key and RequestID identify it in the decision log.
	Key       identity.SessionKey
	RequestID string
}

// Finish accounts for a placed request once it is over: its route,
// stickiness, usage and time to first byte, the replica's health, the
// decision log, and the Placer's end of the request; then it is no longer
// in flight. An outcome with Retry only ends the placement.
func (c *Core) Finish(pl *Placement, o Outcome) {
	rep := pl.Replica
	defer func() {
		rep.inflight.Add(-1) // after accounting: in-flight 0 means counted
		c.metrics.inFlight.Dec()
	}()
	if o.Retry || o.NoEndpoint {
		c.placer.End(pl, false, place.Report{}, -1)
		return
	}
	rank := strconv.Itoa(rep.rank)
	if o.Status >= 500 {
		rep.errors.Add(1)
	}
	if o.Status != 499 {
		rep.health.Request(o.Status >= 500, o.Cause, c.clock(), c.cfg.FailCooldown, c.othersUp(rep))
		countTurn(rep, pl.Reason)
		c.metrics.requests.WithLabelValues(rank, string(pl.Reason)).Inc()
	}
	if !o.FirstByte.IsZero() {
		c.metrics.ttfb.WithLabelValues(rank).Observe(o.FirstByte.Sub(o.Start).Seconds())
	}
	ttft := -1.0
	if !o.FirstToken.IsZero() {
		ttft = o.FirstToken.Sub(o.Start).Seconds()
		c.metrics.ttft.WithLabelValues(rank).Observe(ttft)
	}
	u := o.Usage
	if u.Known {
		u.Cached = min(u.Cached, u.Prompt)
		rep.prompt.Add(u.Prompt)
		rep.cached.Add(u.Cached)
		rep.completion.Add(u.Completion)
		c.metrics.prompt.WithLabelValues(rank).Add(float64(u.Prompt))
		c.metrics.cached.WithLabelValues(rank).Add(float64(u.Cached))
		c.metrics.completion.WithLabelValues(rank).Add(float64(u.Completion))
		c.series.add(c.clock(), u)
	}
	var m missed
	if u.Known {
		m = c.accountMiss(pl, u)
	}
	c.logDecision(pl, o, u, m)
	if c.log.Enabled(context.Background(), slog.LevelDebug) { // the arguments would allocate when it is off
		c.log.Debug("routed", "replica", rep.rank, "route", pl.Reason, "session_source", o.Key.Source,
			"status", o.Status, "prompt_tokens", u.Prompt, "cached_tokens", u.Cached)
	}
	c.placer.End(pl, o.Status != 499, place.Report(o.Usage), ttft)
}

// Retrying counts a request that never reached r's engine and is placed
// again elsewhere (why: "refused", "reset"), and says so in r's log; the
// data plane then finishes its placement with Outcome.Retry.
func (c *Core) Retrying(r *Replica, why string, err error) {
	c.metrics.retries.WithLabelValues(strconv.Itoa(r.rank), why).Inc()
	r.log.Info("the request never reached the engine; trying another replica", "why", why, "error", err)
}

// countTurn adds one served turn to the replica's counter of its reason.
func countTurn(r *Replica, reason place.Reason) {
	r.requests.Add(1)
	switch reason {
	case place.ReasonNew:
		r.newTurns.Add(1)
	case place.ReasonSticky:
		r.sticky.Add(1)
	case place.ReasonSpill:
		r.spilledIn.Add(1)
	case place.ReasonPinned:
		r.pinned.Add(1)
	case place.ReasonFailover:
		r.failover.Add(1)
	case place.ReasonOff, place.ReasonHash:
		r.balanced.Add(1)
	}
}

// othersUp reports whether a replica other than r is in rotation.
func (c *Core) othersUp(r *Replica) bool {
	for _, o := range c.Replicas() {
		if o != r && o.Healthy() {
			return true
		}
	}
	return false
}

// logDecision hands one accounted request to the decision log (nothing
// when the log is off).
func (c *Core) logDecision(pl *Placement, o Outcome, u tap.Usage, m missed) {
	if c.decisions == nil {
		return
	}
	now := c.clock()
	d := decision.Record{At: now, RequestID: o.RequestID, Source: o.Key.Source, Key: o.Key.Key, Subagent: o.Key.Subagent,
		Policy: pl.Policy, Route: string(pl.Reason), Replica: pl.Replica.rank, Wait: pl.Waited,
		Prompt: u.Prompt, Cached: u.Cached, Completion: u.Completion, TTFB: -1, Duration: now.Sub(o.Start), Status: o.Status,
		Predicted: m.predicted, PredictedFrom: m.source, MissReason: m.reason}
	if !o.FirstToken.IsZero() {
		d.TTFB = o.FirstToken.Sub(o.Start)
	}
	c.decisions.add(d)
}

// LogsDecisions reports whether the decision log is on (a data plane reads
// the client's request id only then).
func (c *Core) LogsDecisions() bool { return c.decisions != nil }
