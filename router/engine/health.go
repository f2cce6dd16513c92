// Package engine owns what the router core knows of one engine replica apart
// from its own request counters: whether it is in rotation (Health, a
// small state machine driven by events from the launcher, the core's
// health checks and its requests) and what the engine's /metrics said
// (Scraped: gauges, counters as deltas since warden start, KV capacity).
// It imports only the project's Prometheus reader and the panel's metric
// names (another warden as a replica); it knows nothing of placement or
// sessions, and does no I/O: the core fetches, this package interprets.
package engine

import (
	"log/slog"
	"sync"
	"time"
)

// State is where a replica stands in the rotation.
type State int

// The states of Health, and what moves a replica between them:
//
//	Starting   the launcher says the engine is not up (loading, restarting, down);
//	           Launcher(up) -> InRotation
//	Probing    a server the warden did not start, before its first good check;
//	           a good Check -> InRotation
//	InRotation taking requests; a failed Check -> Failing; Refused -> Out;
//	           ReqFailsDown failed Requests in a row (and another replica up) -> Cooling
//	Failing    still taking requests after 1..CheckFailsDown-1 failed checks;
//	           a good Check -> InRotation; the CheckFailsDown-th failure -> Out
//	Out        out of rotation; a good Check -> InRotation
//	Cooling    out after failed requests until the cooldown has passed and a
//	           Check is good -> InRotation
//
// Launcher(down) moves any state to Starting.
const (
	Starting State = iota
	Probing
	InRotation
	Failing
	Out
	Cooling
)

var stateNames = [...]string{"starting", "probing", "in rotation", "failing", "out", "cooling"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Thresholds of the state machine.
const (
	CheckFailsDown = 3 // consecutive failed health checks or scrapes that take a replica out
	ReqFailsDown   = 3 // consecutive failed requests (5xx, no headers in time, a broken stream) that do
)

// Health is one replica's rotation state. Its event methods are the only
// writers; all are safe for concurrent use.
type Health struct {
	log *slog.Logger

	mu             sync.Mutex
	state          State
	checkFails     int       // consecutive failed checks
	reqFails       int       // consecutive failed requests
	until          time.Time // Cooling: not back before this
	launcherState  string    // what the launcher last said, for display ("healthy", "loading", ...)
	launcherReason string
	joined         time.Time // when it last (re-)entered the rotation; zero: in it since NewHealth
}

// NewHealth starts in rotation, or (probe) in Probing until a good check:
// the core enters a launched engine's replica only after the launcher says
// it is up, and a probed server only after it answered.
func NewHealth(probe bool, log *slog.Logger) *Health {
	h := &Health{log: log, state: InRotation, launcherState: "ready"}
	if probe {
		h.state = Probing
	}
	return h
}

// Routable reports whether the replica takes requests now.
func (h *Health) Routable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.routable()
}

func (h *Health) routable() bool { return h.state == InRotation || h.state == Failing }

// State is the current state.
func (h *Health) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Joined is when the replica last entered the rotation from outside it
// (after starting, a restart, a failure); zero if it has been in rotation
// since it was created. Placement ramps a replica up from then.
func (h *Health) Joined() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.joined
}

// join moves the replica into rotation at now, noting when it came back.
// The caller holds h.mu.
func (h *Health) join(now time.Time) {
	if !h.routable() {
		h.joined = now
	}
	h.state, h.checkFails, h.reqFails = InRotation, 0, 0
}

// Display is what the panel shows: the launcher's word for the engine
// ("healthy", "loading", ...), or "unhealthy" when the launcher says up but
// the replica is out of rotation.
func (h *Health) Display() (state string, routable bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != Starting && !h.routable() {
		return "unhealthy", false
	}
	return h.launcherState, h.routable()
}

// Launcher records the launcher's view: up (healthy after a start or a
// restart) puts the replica in rotation with a clean record; down takes it
// out until the launcher says up again.
func (h *Health) Launcher(up bool, state, reason string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.launcherState, h.launcherReason = state, reason
	if !up {
		h.state = Starting
		return
	}
	h.join(now)
}

// Check records one health check or scrape outcome at now.
func (h *Health) Check(ok bool, err error, now time.Time) {
	h.mu.Lock()
	was := h.state
	switch {
	case h.state == Starting:
		// The launcher decides; checks of a loading engine fail as expected.
	case ok && h.state == Cooling && now.Before(h.until):
	case ok:
		h.join(now)
	case h.state == InRotation || h.state == Failing:
		h.checkFails++
		h.state = Failing
		if h.checkFails >= CheckFailsDown {
			h.state = Out
		}
	}
	now2 := h.state
	h.mu.Unlock()
	h.logChange(was, now2, err)
}

// Refused records a connection the engine refused on the request path: out
// at once (the next good check brings it back).
func (h *Health) Refused(err error) {
	h.mu.Lock()
	was := h.state
	if h.routable() {
		h.state = Out
	}
	now := h.state
	h.mu.Unlock()
	h.logChange(was, now, err)
}

// Request records one finished request at now. After ReqFailsDown failures
// in a row the replica leaves rotation for at least cooldown; but not when
// no other replica is up (othersUp false): then failing requests still beat
// none being served, and a request that makes every engine fail cannot
// empty the rotation.
func (h *Health) Request(failed bool, cause string, now time.Time, cooldown time.Duration, othersUp bool) {
	h.mu.Lock()
	if !failed {
		h.reqFails = 0
		h.mu.Unlock()
		return
	}
	h.reqFails++
	trip := h.reqFails >= ReqFailsDown && h.routable() && othersUp
	if trip {
		h.state, h.until = Cooling, now.Add(cooldown)
	}
	n := h.reqFails
	h.mu.Unlock()
	if trip {
		h.log.Warn("replica out of rotation after consecutive failed requests",
			"failed_requests", n, "cooldown", cooldown.String(), "error", cause)
	}
}

// logChange says when the replica left or re-entered the rotation (not
// while it is starting, and not for Request's own message).
func (h *Health) logChange(was, now State, err error) {
	in := func(s State) bool { return s == InRotation || s == Failing }
	switch {
	case was == Starting || now == Starting:
	case in(was) && !in(now):
		h.log.Warn("replica out of rotation", "error", err)
	case !in(was) && in(now):
		h.log.Info("replica back in rotation")
	}
}
