package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/lmwarden/warden/proxy/place"
	"github.com/lmwarden/warden/proxy/tap"
)

// The proxy's side of the adaptive policy: feeding routeState and holding
// requests that the policy told to wait (place.ReasonWait) until a request ends.

// maxHold bounds one request's wait at the proxy whatever the policy says
// (a safety net: the policy's own bound is a few turn times).
const maxHold = 10 * time.Minute

// adaptiveView completes the snapshot and session view with routeState's
// estimates, which only the adaptive policy reads (routeState keeps learning
// under every policy, in begin and end). The caller holds p.mu.
func (p *Proxy) adaptiveView(snap []place.ReplicaView, sv *place.SessionView, bodyBytes int, waited time.Duration, now time.Time) {
	p.route.SetPolicy(p.policy)
	if p.policy != place.PolicyAdaptive {
		return
	}
	p.route.FillView(snap, now)
	p.route.ViewSession(sv, bodyBytes, snap)
	sv.Waited = waited.Seconds()
	sv.Held = p.held
	sv.NoWait = waited > maxHold
}

// routeEnd tells routeState that a placed request ended (or never reached
// its engine) and wakes the requests held for room.
func (p *Proxy) routeEnd(pl placement, at *attempt, start time.Time) {
	if pl.ticket == nil {
		return
	}
	var u tap.Usage
	ttfb := -1.0
	if at != nil && at.tap != nil && !at.retry {
		u = at.tap.Usage()
		if !at.tap.FirstByte().IsZero() {
			ttfb = at.tap.FirstByte().Sub(start).Seconds()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.route.End(pl.ticket, place.Report(u), ttfb, p.clock())
	p.wakeHeld()
}

// wakeHeld wakes every held request to ask again. The caller holds p.mu.
func (p *Proxy) wakeHeld() {
	if p.held > 0 {
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// hold waits until a request ends somewhere, the recheck interval passes or
// ctx ends; it reports false when ctx ended (the client went away).
func (p *Proxy) hold(ctx context.Context, wake <-chan struct{}) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

// placeOrHold places the request; when the policy says wait it holds the
// request (counted in p.held) and asks again whenever a request ends, until
// it is placed or the client goes away (then it returns the wait decision).
func (p *Proxy) placeOrHold(r *http.Request, req *request, pinned bool, pin int, skip []int) placement {
	start := p.clock()
	held := false
	defer func() {
		if held {
			p.mu.Lock()
			p.held--
			p.mu.Unlock()
		}
	}()
	for {
		waited := p.clock().Sub(start)
		pl := p.place(req.key, pinned, pin, skip, len(req.body), waited)
		if pl.d.Reason != place.ReasonWait {
			if held {
				pl.waited = waited
			}
			return pl
		}
		p.mu.Lock()
		if !held {
			held = true
			p.held++
		}
		wake := p.wake
		p.mu.Unlock()
		if !p.hold(r.Context(), wake) {
			return pl
		}
	}
}
