package engine

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestHealthStateMachine(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	boom := errors.New("boom")
	type step struct {
		event    func(h *Health)
		want     State
		routable bool
	}
	check := func(ok bool, at time.Duration) func(*Health) {
		return func(h *Health) { h.Check(ok, boom, t0.Add(at)) }
	}
	failReq := func(othersUp bool) func(*Health) {
		return func(h *Health) { h.Request(true, "502", t0, 10*time.Second, othersUp) }
	}
	for _, tc := range []struct {
		name  string
		probe bool
		steps []step
	}{
		{"failed checks: failing, then out; one good check brings it back", false, []step{
			{check(false, 0), Failing, true}, {check(false, 0), Failing, true}, {check(false, 0), Out, false},
			{check(false, 0), Out, false}, {check(true, 0), InRotation, true},
		}},
		{"a probed server enters with its first good check", true, []step{
			{check(false, 0), Probing, false}, {check(true, 0), InRotation, true},
		}},
		{"a refused connection: out at once", false, []step{
			{func(h *Health) { h.Refused(boom) }, Out, false}, {check(true, 0), InRotation, true},
		}},
		{"failed requests: cooling until the cooldown has passed and a check is good", false, []step{
			{failReq(true), InRotation, true}, {failReq(true), InRotation, true}, {failReq(true), Cooling, false},
			{check(true, 5*time.Second), Cooling, false}, {check(false, 11*time.Second), Cooling, false},
			{check(true, 11*time.Second), InRotation, true},
		}},
		{"the last replica up does not cool down", false, []step{
			{failReq(false), InRotation, true}, {failReq(false), InRotation, true}, {failReq(false), InRotation, true},
		}},
		{"a good request resets the streak", false, []step{
			{failReq(true), InRotation, true}, {failReq(true), InRotation, true},
			{func(h *Health) { h.Request(false, "", t0, time.Second, true) }, InRotation, true},
			{failReq(true), InRotation, true},
		}},
		{"the launcher decides while it says down", false, []step{
			{func(h *Health) { h.Launcher(false, "loading", "restart", time.Time{}) }, Starting, false},
			{check(true, 0), Starting, false}, {check(false, 0), Starting, false},
			{func(h *Health) { h.Launcher(true, "healthy", "", time.Time{}) }, InRotation, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHealth(tc.probe, slog.New(slog.DiscardHandler))
			for i, s := range tc.steps {
				s.event(h)
				if h.State() != s.want || h.Routable() != s.routable {
					t.Fatalf("step %d: %s (routable %v), want %s (%v)", i, h.State(), h.Routable(), s.want, s.routable)
				}
			}
		})
	}
}

func TestHealthDisplayAndLogs(t *testing.T) {
	var logs bytes.Buffer
	h := NewHealth(false, slog.New(slog.NewTextHandler(&logs, nil)))
	h.Launcher(false, "loading", "engine loading", time.Time{})
	h.Check(false, errors.New("refused"), time.Now()) // quiet: the engine is loading
	if st, up := h.Display(); st != "loading" || up {
		t.Errorf("while loading: %q %v", st, up)
	}
	h.Launcher(true, "healthy", "", time.Time{})
	for range CheckFailsDown {
		h.Check(false, errors.New("timeout"), time.Now())
	}
	if st, up := h.Display(); st != "unhealthy" || up {
		t.Errorf("out of rotation: %q %v", st, up)
	}
	h.Check(true, nil, time.Now())
	out := logs.String()
	if strings.Count(out, "out of rotation") != 1 || strings.Count(out, "back in rotation") != 1 || strings.Contains(out, "refused") {
		t.Errorf("logs:\n%s", out)
	}
}

// TestHealthJoined: Joined says when the replica last came back into the
// rotation from outside it, not when it went from failing back to healthy.
func TestHealthJoined(t *testing.T) {
	h := NewHealth(false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t0 := time.Unix(100, 0)
	if !h.Joined().IsZero() {
		t.Fatal("a replica in rotation since creation has a join time")
	}
	h.Check(false, errors.New("x"), t0) // failing: still routable
	h.Check(true, nil, t0.Add(time.Second))
	if !h.Joined().IsZero() {
		t.Errorf("failing -> in rotation counted as a return: %v", h.Joined())
	}
	h.Launcher(false, "loading", "restart", t0.Add(2*time.Second))
	h.Launcher(true, "healthy", "", t0.Add(3*time.Second))
	if !h.Joined().Equal(t0.Add(3 * time.Second)) {
		t.Errorf("back after a restart: joined %v, want %v", h.Joined(), t0.Add(3*time.Second))
	}
	h.Refused(errors.New("refused"))
	h.Check(true, nil, t0.Add(5*time.Second))
	if !h.Joined().Equal(t0.Add(5 * time.Second)) {
		t.Errorf("back after out: joined %v", h.Joined())
	}
}
