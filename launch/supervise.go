package launch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/warden/enginelog"
	"github.com/lmwarden/warden/internal/ports"
)

// run is rank r's supervisor: the only writer of its state. It starts the
// engine, reports the startup result, then restarts it after each crash
// until Stop. A run healthy for StableAfter ends a crash loop: the next
// crash is restarted after RestartMin again.
func (g *Group) run(r *rank, startup chan<- error) {
	defer g.wg.Done()
	err := g.launch(r, "start")
	if err != nil {
		// Stopped before Start hears of it: the display's last frame shows it.
		g.setState(r, Stopped, err.(*StartupError).Cause)
		startup <- err
		return
	}
	startup <- nil
	var loop crashLoop
	for {
		p := r.current()
		readyAt := time.Now()
		select {
		case <-g.stopping:
			g.stopProc(r, p)
			g.setState(r, Stopped, "stopped")
			return
		case <-p.exited:
		}
		cause, fix := crashReason(p), crashFix(p)
		g.cleanup(r, p)
		cause = r.withExit(cause)
		g.setState(r, Down, cause)
		if time.Since(readyAt) >= g.opts.StableAfter {
			loop = crashLoop{}
		}
		if !g.restart(r, &loop, cause, fix) {
			g.setState(r, Stopped, "stopped")
			return
		}
	}
}

// crashLoop is one rank's failures in a row (crashes within StableAfter of
// becoming healthy, and failed restarts) and whether its cause and fix
// were logged.
type crashLoop struct {
	failures  int
	announced bool
}

// fail counts one more failure and returns the wait before the next
// restart: lo for the first failure in a row, doubled per further failure,
// at most hi.
func (l *crashLoop) fail(lo, hi time.Duration) time.Duration {
	l.failures++
	d := lo
	for i := 1; i < l.failures && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// restart starts r again, after a wait that grows with the failures in a
// row (crashLoop.fail), until an engine is healthy (true) or Stop begins
// (false). cause and fix are why the engine went down and what to do.
func (g *Group) restart(r *rank, loop *crashLoop, cause, fix string) bool {
	for {
		delay := loop.fail(g.opts.RestartMin, g.opts.RestartMax)
		g.noteCrash(r, loop, Crash{At: time.Now(), Cause: cause, Fix: fix, Failures: loop.failures,
			Delay: delay, LogPath: r.spec.LogPath})
		t := time.NewTimer(delay)
		select {
		case <-g.stopping:
			t.Stop()
			return false
		case <-t.C:
		}
		r.mu.Lock()
		r.restarts++
		n := r.restarts
		r.mu.Unlock()
		fmt.Fprintf(r.logf, "\n=== warden: restart %d of rank %d at %s: the engine %s ===\n",
			n, r.spec.Rank, time.Now().Format(time.RFC3339), cause)
		err := g.launch(r, "restart")
		if err == nil {
			r.log.Info("engine restarted", "restarts", n)
			return true
		}
		se := err.(*StartupError)
		if se.Cause == "canceled" {
			return false
		}
		cause, fix = se.Cause, se.Hint
		if se.Reason != "" {
			cause += ": " + se.Reason
		}
		g.setState(r, Down, cause)
	}
}

// noteCrash records c as r's last crash, tells OnCrash, and logs it: with
// its cause for the first failures in a row; at CrashLoopAfter failures
// once, as an error, with the cause and its fix; after that one short line
// per restart (a cause that varies from try to try, such as vLLM's free
// memory figures, must not repeat the message; the status has the latest).
func (g *Group) noteCrash(r *rank, loop *crashLoop, c Crash) {
	r.mu.Lock()
	c.Restarts = r.restarts
	c.Loop = c.Failures >= g.opts.CrashLoopAfter
	r.crash, r.crashed = c, true
	r.mu.Unlock()
	switch {
	case !c.Loop:
		r.log.Warn("engine down; restarting", "reason", c.Cause, "after", c.Delay.String(), "failures", c.Failures)
	case !loop.announced:
		loop.announced = true
		fix := c.Fix
		if fix == "" {
			fix = "read the rank's log for the cause: " + c.LogPath
		}
		others := ""
		if len(g.ranks) > 1 {
			others = "; the other replicas keep serving"
		}
		r.log.Error(fmt.Sprintf("engine crash loop: %d failures in a row (failed restarts, or crashes within %s of "+
			"becoming healthy); restarts go on, at most %s apart, and this is said once%s",
			c.Failures, g.opts.StableAfter, g.opts.RestartMax, others),
			"cause", c.Cause, "fix", fix, "log", c.LogPath)
	default:
		r.log.Info("engine still failing; restarting", "failures", c.Failures, "after", c.Delay.String())
	}
	if g.opts.OnCrash != nil {
		g.opts.OnCrash(r.spec.Rank, c)
	}
}

// crashWindow is how many of a crashed engine's last output lines are
// searched for the cause: the tracebacks of its processes, not the errors
// of requests served hours before.
const crashWindow = 2000

// crashReason says why a running engine ended: "exited with status 1:
// <vLLM's cause line>", or the last line that is no warning when the log
// names no cause (none after a SIGKILL: its last lines tell nothing).
func crashReason(p *proc) string {
	lines := p.lastLines()
	reason := p.exitReason()
	if cause := exitedReason(p); cause != "" {
		return reason + ": " + cause
	}
	if p.signaled() != 0 {
		return reason
	}
	if msg, ok := enginelog.LastMessage(lines); ok {
		return reason + ": " + msg
	}
	return reason
}

// crashFix is what to do about a running engine's end: the hint of its
// known cause, or of the signal that killed it; "" when none is known.
func crashFix(p *proc) string {
	if h := exitedDiagnosis(p).Hint; h != "" {
		return h
	}
	return exitHint(p.signaled())
}

func (r *rank) current() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// launch starts r's engine and waits until it is healthy. On failure the
// engine is stopped and the error is a *StartupError.
func (g *Group) launch(r *rank, what string) error {
	s := r.spec
	base := 0 // lines of the log before the engine's output
	fail := func(cause string, p *proc) *StartupError {
		se := &StartupError{Rank: s.Rank, Port: s.Port, Where: s.where(), Cause: cause, LogPath: s.LogPath}
		if p != nil {
			se.LastLines = p.lastLines()
			diagnose(se, p, base)
		}
		if p == nil && strings.Contains(cause, "is in use") {
			se.Hint = enginelog.Hint([]string{"Address already in use"}, s.Port)
		}
		if se.Hint == "" && strings.HasPrefix(cause, "not healthy after") {
			se.Hint = "loading can take minutes for large models: raise --startup-timeout, and check the log"
		}
		return se
	}
	if err := ports.Bindable("127.0.0.1", s.Port); err != nil {
		return fail("cannot start: "+err.Error(), nil)
	}
	if err := r.beforeStart(); err != nil {
		return fail("cannot start: "+err.Error(), nil)
	}
	fmt.Fprintf(r.logf, "=== warden: %s rank %d at %s: %s (%s) ===\n",
		what, s.Rank, time.Now().Format(time.RFC3339), strings.Join(s.Argv, " "), s.deviceEnv())
	base = r.logLines()
	p, err := spawn(s.Argv, r.env, r.logf, s.CPUs)
	if err != nil {
		return fail("cannot start "+s.Argv[0]+": "+err.Error(), nil)
	}
	if c := s.Container; c != nil {
		if err := c.watch(p.pid); err != nil { // the container then lives only as long as the warden does
			r.log.Warn("the engine's container has no watchdog", "container", c.Name, "err", err)
		}
	}
	r.mu.Lock()
	r.cur = p
	r.mu.Unlock()
	g.setState(r, Starting, what)
	r.log.Info("engine started", "pid", p.pid, "what", what)
	cause := g.waitHealthy(r, p)
	if cause == "" {
		p.noteOffloadFiles(context.Background())
		g.setState(r, Ready, "healthy")
		r.log.Info("engine healthy", "pid", p.pid, "took", time.Since(p.started).Round(time.Millisecond).String())
		return nil
	}
	if !p.alive() {
		cause = p.exitReason()
	}
	g.stopProc(r, p)
	return r.withExitError(fail(cause, p))
}

// exitedReason is vLLM's cause line of an engine that ended by itself,
// "" when none (or when a SIGKILL ended it and the cause is no known one).
func exitedReason(p *proc) string { return exitedDiagnosis(p).Reason }

// exitedDiagnosis is exitedReason with its hint.
func exitedDiagnosis(p *proc) enginelog.Diagnosis {
	d := p.tail.Diagnose(0, crashWindow)
	if !d.Known && p.cmd != nil && p.signaled() == syscall.SIGKILL {
		return enginelog.Diagnosis{}
	}
	return d
}

// contextLines is how many of the last lines a StartupError shows when
// the log names no cause.
const contextLines = 10

// diagnose fills se's Reason, Hint and Context from what p printed since it
// started; base is the number of log lines before its output. An engine
// that a SIGKILL ended (the OOM killer, or someone) gets a reason only from
// a known cause: an exception it logged while loading is not why it died.
func diagnose(se *StartupError, p *proc, base int) {
	d := p.tail.Diagnose(se.Port, 0)
	killed := strings.HasPrefix(se.Cause, "killed by signal")
	if killed && p.signaled() == syscall.SIGKILL && !d.Known {
		d = enginelog.Diagnosis{}
	}
	se.Reason, se.Hint = d.Reason, d.Hint
	if d.Reason != "" {
		se.ReasonLine, se.LinesAfter, se.Context = base+d.Line, d.After, d.Context
	} else {
		se.Context = append([]string{}, se.LastLines[max(len(se.LastLines)-contextLines, 0):]...)
	}
	if se.Hint == "" && killed {
		se.Hint = exitHint(p.signaled())
	}
}

// waitHealthy polls GET /health until it answers 200 while watching for the
// process to exit, the timeout, and Stop. It returns "" when healthy, else
// the cause: "exited ...", "not healthy after D", "canceled".
func (g *Group) waitHealthy(r *rank, p *proc) string {
	url := fmt.Sprintf("http://127.0.0.1:%d/health", r.spec.Port)
	deadline := time.NewTimer(g.opts.StartupTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(g.opts.PollInterval)
	defer tick.Stop()
	loading := false
	for {
		if g.healthy(url) {
			return ""
		}
		if !loading && p.tail.Wrote() {
			loading = true
			g.setState(r, Loading, "output")
		}
		select {
		case <-g.stopping:
			return "canceled"
		case <-p.exited:
			return p.exitReason()
		case <-deadline.C:
			return "not healthy after " + g.opts.StartupTimeout.String()
		case <-tick.C:
		}
	}
}

// healthy reports whether GET url answered 200. Refused connections are
// normal while the engine loads.
func (g *Group) healthy(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stopProc stops one engine: SIGTERM to its group, the grace (cut short by
// a forced Stop), then SIGKILL to the group and to descendants that left it,
// until none is left.
func (g *Group) stopProc(r *rank, p *proc) {
	if p == nil {
		return
	}
	kids := descendants(context.Background(), p.pid)
	if p.alive() {
		r.log.Info("stopping engine", "pid", p.pid, "grace", g.opts.StopGrace.String())
		if err := signalGroup(p.pid, sigTERM); err != nil {
			r.log.Warn("SIGTERM failed", "pid", p.pid, "err", err)
		}
		t := time.NewTimer(g.opts.StopGrace)
		select {
		case <-p.exited:
		case <-t.C:
			r.log.Warn("engine still running after grace; killing its process group", "pid", p.pid)
		case <-g.force:
		}
		t.Stop()
	}
	g.reap(r, p, kids)
}

// cleanup kills what is left of a crashed engine's group (its EngineCore may
// outlive the API server and hold the GPU).
func (g *Group) cleanup(r *rank, p *proc) {
	g.reap(r, p, nil)
}

func (g *Group) reap(r *rank, p *proc, kids []*processT) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left := killTree(ctx, p.pid, kids)
	<-p.exited
	if r != nil {
		r.afterExit()
	}
	log := g.log
	if r != nil {
		log = r.log
	}
	if len(left) > 0 {
		log.Error("engine processes survived SIGKILL", "pgid", p.pid, "left", len(left))
		return // the survivors may still map its host KV tier
	}
	for _, f := range p.removeOffloadFiles() {
		log.Info("removed the host KV tier file the engine left in /dev/shm", "pid", p.pid, "file", f)
	}
}
