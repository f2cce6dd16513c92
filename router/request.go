package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/ledger"
	"github.com/lmwarden/warden/router/modelname"
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

// Request is one request as the core identified it, the same for every
// data plane.
type Request struct {
	// Fields are the body's top-level fields (identity.Scan); Model is the
	// served name when the request's was mapped. They point into the body
	// as read: read them before editing it.
	Fields identity.Fields
	Kind   tap.Kind // the API, by path (tap.None: not one whose usage is read)
	Stream bool     // a streamed answer was asked for (an API of Kind only)
	// Model is what to do with the model name: modelname.Rewrite, the data
	// plane sends RewriteModel's body; modelname.Refuse, it answers 404
	// (nothing else of the request is identified then).
	Model modelname.Action
	// Key is which conversation it is; Place the placement request
	// (BodyBytes the body as read: a data plane that edits it sets the
	// length it sends).
	Key   identity.SessionKey
	Place place.Request
	// ID is the client's X-Request-Id for the decision log ("" when the log
	// is off).
	ID string
}

// Identify reads what placement needs of a request from its path, headers
// and body: the API, the model name (mapped to the served one, or refused
// in strict mode), the session key (headers, then the body's top-level
// fields, one pass) and the client's pin (X-Warden-Replica). The error is a
// malformed pin, the client's (400).
func (c *Core) Identify(h http.Header, path string, body []byte) (Request, error) {
	req := Request{Fields: identity.Scan(body), Kind: tap.KindOf(path)} // one pass over the top-level keys
	f := &req.Fields
	if req.Kind != tap.None {
		req.Stream = f.Stream.Bool()
	}
	if req.Model = c.names.Resolve(f.Model); req.Model == modelname.Refuse {
		return req, nil
	}
	if req.Model == modelname.Rewrite {
		f.Model = c.names.Served() // identity sees the served name on every turn
	}
	if c.decisions != nil {
		req.ID = h.Get(decision.RequestIDHeader)
		req.ID = req.ID[:min(len(req.ID), decision.MaxRequestID)]
	}
	k := identity.ExtractFrom(h, *f, c.cfg.SessionHeaders)
	k.Key = k.Conversation(c.cfg.SubagentsWithParent)
	req.Key = k
	pin, pinned, err := identity.ParsePin(h)
	if err != nil {
		return req, err
	}
	req.Place = place.Request{Key: k.Key, Subagent: k.Subagent && (k.Agent == "" || !c.cfg.SubagentsWithParent),
		Pinned: pinned, Pin: pin, BodyBytes: len(body)}
	return req, nil
}

// RewriteModel sets the body's top-level "model" to the served name (for a
// Request whose Model is modelname.Rewrite), in place when it is not longer.
func (c *Core) RewriteModel(body []byte) []byte { return c.names.Rewrite(body) }

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

// Retry says why an attempt did not serve the request on its replica; the
// core accounts it in the one Finish call: counted as retried (by why) and
// said in the replica's log, the placement ended with nothing else counted.
type Retry int

// Why a request was not served where it was placed.
const (
	Served Retry = iota // it reached the engine: accounted as a turn (or not, NoEndpoint)
	// Refused: the engine refused the connection (Outcome.Err). The replica
	// leaves the rotation until a health check succeeds; the data plane
	// places the request again elsewhere.
	Refused
	// Reset: the engine closed or reset the connection before any answer
	// byte (Outcome.Err); the data plane places the request again
	// elsewhere. The health checks decide whether the replica is down.
	Reset
	// ServedElsewhere: the gateway served the request on another endpoint
	// (Outcome.ServedOn) after the pick failed: the pick leaves the
	// rotation as on Refused, and Finish places the request again on the
	// endpoint that served it (see Finish).
	ServedElsewhere
)

// Outcome is what a data plane saw of one placed request.
type Outcome struct {
	// Retry says whether the request was served where it was placed; not
	// Served: nothing else of the outcome is counted.
	Retry Retry
	// Err is the connection error of a Refused or Reset attempt.
	Err error
	// ServedOn is the endpoint (host:port) that served a ServedElsewhere
	// request; Request is its placement request, placed again there.
	ServedOn string
	Request  place.Request
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
// stickiness, usage and time to first token, the replica's health, the
// decision log, and the Placer's end of the request; then it is no longer
// in flight. An outcome that was not Served is counted as retried and only
// ends the placement; for ServedElsewhere, Finish then places the request
// on the endpoint that served it and returns that placement, which the
// data plane finishes when the answer ends (Rank < 0: the endpoint is no
// replica in rotation, and the request is not accounted). The returned
// placement is zero (Rank -1) for every other outcome.
func (c *Core) Finish(pl *Placement, o Outcome) Placement {
	switch o.Retry {
	case Refused:
		pl.Replica.Refused(o.Err)
		c.retried(pl, "refused", o.Err)
	case Reset:
		c.retried(pl, "reset", o.Err)
	case ServedElsewhere:
		// Name the box that did not answer first: the one that served is fine.
		dead := pl.Replica.URL().Host
		pl.Replica.Refused(fmt.Errorf("%s did not answer: the gateway served the request on %s instead", dead, o.ServedOn))
		c.retried(pl, "gateway", fmt.Errorf("%s did not answer; the gateway served the request on %s", dead, o.ServedOn))
		return c.placeServed(o.ServedOn, o.Request)
	default:
		c.account(pl, o)
	}
	return Placement{Decision: place.Decision{Rank: -1}}
}

// retried ends a placement whose request never reached the engine: counted
// as a retry (why: "refused", "reset", "gateway") and said in the
// replica's log; nothing else is counted.
func (c *Core) retried(pl *Placement, why string, err error) {
	r := pl.Replica
	c.metrics.retries.WithLabelValues(strconv.Itoa(r.rank), why).Inc()
	r.log.Info("the request never reached the engine; trying another replica", "why", why, "error", err)
	c.placer.End(pl, false, place.Report{}, -1)
	c.endFlight(r)
}

// endFlight takes a finished request out of the in-flight counts, after
// its accounting (in-flight 0 means counted).
func (c *Core) endFlight(r *Replica) {
	r.inflight.Add(-1)
	c.metrics.inFlight.Dec()
}

// placeServed places a request the gateway already served on the replica
// at endpoint: now, never held (the answer is on its way), by the policy
// among that replica alone, or pinned to it when the policy will not take
// it. Rank < 0 when no replica in rotation has that endpoint.
func (c *Core) placeServed(endpoint string, req place.Request) Placement {
	req.Skip = nil
	pin := -1
	for _, r := range c.Replicas() {
		if r.URL().Host == endpoint {
			pin = r.Rank()
		} else {
			req.Skip = append(req.Skip, r.Rank())
		}
	}
	if pin < 0 {
		c.log.Warn("the gateway served a request on an endpoint that is not a replica: it is not accounted", "endpoint", endpoint)
		return Placement{Decision: place.Decision{Rank: -1}}
	}
	// A done context makes Place return at once when the policy would wait.
	now, cancel := context.WithCancel(context.Background())
	cancel()
	pl := c.Place(now, req)
	if pl.Rank < 0 {
		req.Pinned, req.Pin = true, pin
		pl = c.Place(now, req)
	}
	if pl.Rank < 0 {
		c.log.Warn("the gateway served a request on a replica out of rotation: it is not accounted", "endpoint", endpoint)
	}
	return pl
}

// account counts a request that reached its engine.
func (c *Core) account(pl *Placement, o Outcome) {
	rep := pl.Replica
	defer c.endFlight(rep)
	if o.NoEndpoint {
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
		Prompt: u.Prompt, Cached: u.Cached, Completion: u.Completion, TTFT: -1, Duration: now.Sub(o.Start), Status: o.Status,
		Predicted: m.predicted, PredictedFrom: m.source, MissReason: m.reason}
	if !o.FirstToken.IsZero() {
		d.TTFT = o.FirstToken.Sub(o.Start)
	}
	c.decisions.add(d)
}

// LogsDecisions reports whether the decision log is on.
func (c *Core) LogsDecisions() bool { return c.decisions != nil }
