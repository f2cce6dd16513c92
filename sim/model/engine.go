package model

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ErrStopped is returned to requests when the engine has stopped.
var ErrStopped = errors.New("sim engine stopped")

// Snapshot is the engine state that /metrics reads, published after every
// step (before any request hears about that step's tokens).
type Snapshot struct {
	Running, Waiting int
	KVUsage          float64
	Counters         Counters
	Host             HostSnapshot // the host-RAM KV tier's gauges (Host.On false without it)
	// BusySeconds is simulated time spent in steps; LagSeconds is simulated
	// time lost because the engine (CPU) started a step later than the
	// previous one ended. LagSeconds/(BusySeconds+LagSeconds) near 0 means
	// the process keeps up with its time scale.
	BusySeconds, LagSeconds float64
}

// EngineConfig is what the engine loop needs besides its scheduler and
// profile.
type EngineConfig struct {
	BlockSize      int     // tokens per KV block, as the scheduler's
	StreamInterval int     // tokens a request is handed at once after its first (1: each token)
	TimeScale      float64 // simulated seconds per wall second (> 0)
	Seed           uint64  // varies the generated text
}

// Request is one generation request as handlers and the engine share it.
// The engine appends generated text under mu and signals notify (capacity
// 1); the handler drains it with Take. The engine never blocks on a
// handler.
type Request struct {
	seq        *Seq
	stopped    <-chan struct{} // the engine's: closed when it has stopped
	arrival    float64         // simulated seconds
	genSeed    uint64
	stopReason string // "length" or "stop"
	unsent     []string
	// forced, when set, is the output instead of generated text: token i is
	// forcedIDs[i] with text forced[i] (a tool call the request forced).
	forced    []string
	forcedIDs []uint32

	mu       sync.Mutex
	texts    []string
	finished bool
	notify   chan struct{}
	aborted  bool
}

// Take returns the text generated since the last call and whether the
// request has finished; it waits until there is something, ctx ends or the
// engine stops (ErrStopped).
func (r *Request) Take(ctx context.Context) ([]string, bool, error) {
	for {
		r.mu.Lock()
		texts, fin := r.texts, r.finished
		r.texts = nil
		r.mu.Unlock()
		if len(texts) > 0 || fin {
			return texts, fin, nil
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-r.stopped:
			return nil, false, ErrStopped
		}
	}
}

// Seq is the request inside the engine: read its counts (NumPrompt,
// Output, CachedTokens) once Take has reported it finished.
func (r *Request) Seq() *Seq { return r.seq }

// StopReason is the finish reason the request reports: "length" or "stop".
func (r *Request) StopReason() string { return r.stopReason }

// Engine runs the scheduler against a simulated clock. One goroutine (Run)
// owns the scheduler; handlers talk to it through channels. The On hooks
// are called on the engine goroutine; set them before Run.
type Engine struct {
	cfg    EngineConfig
	prof   Profile
	sched  *Scheduler
	gen    *generator
	log    *slog.Logger
	OnStep func(Snapshot)        // publishes metrics
	OnTTFT func(seconds float64) // first-token latency in simulated seconds
	OnDone func(reason string)   // request finished (length, stop, abort)
	// OnKVEvents, when set (with Scheduler.EnableKVEvents), gets each step's KV events
	// (and those of a reset or abort between steps), before OnStep. It must not block.
	OnKVEvents func([]KVEvent)

	submit  chan *Request
	aborts  chan *Request
	ctl     chan func()
	stopped chan struct{}

	wallStart time.Time
	simT      float64
	busy, lag float64
	wasBusy   bool // the previous loop iteration ran a step
	nextID    uint64
	idMu      sync.Mutex
}

// NewEngine builds an engine; Run starts it.
func NewEngine(cfg EngineConfig, prof Profile, sched *Scheduler, log *slog.Logger) *Engine {
	return &Engine{
		cfg: cfg, prof: prof, sched: sched, gen: newGenerator(), log: log,
		OnStep: func(Snapshot) {}, OnTTFT: func(float64) {}, OnDone: func(string) {},
		submit: make(chan *Request, 256), aborts: make(chan *Request, 256), ctl: make(chan func()),
		stopped: make(chan struct{}), wallStart: time.Now(),
	}
}

// SimNow is the simulated time in seconds since the engine was built.
func (e *Engine) SimNow() float64 { return time.Since(e.wallStart).Seconds() * e.cfg.TimeScale }

// SubmitForced queues a request for prompt; maxTokens is how many tokens it
// will generate, stopReason the finish reason it will report, and token i
// of its output is ids[i] with text pieces[i] (len(ids) >= maxTokens).
func (e *Engine) SubmitForced(prompt []uint32, maxTokens int, stopReason string, ids []uint32, pieces []string) (*Request, error) {
	return e.SubmitWith(prompt, maxTokens, stopReason, ids, pieces, SubmitOptions{})
}

// SubmitOptions are a request's labels for KV events.
type SubmitOptions struct {
	Session    string // session_id its BlockStored events carry
	ReportFull bool   // kv_cache_report_mode "full": its prefix hits are re-reported
}

// SubmitWith is SubmitForced with opts.
func (e *Engine) SubmitWith(prompt []uint32, maxTokens int, stopReason string, ids []uint32, pieces []string, opts SubmitOptions) (*Request, error) {
	e.idMu.Lock()
	e.nextID++
	id := e.nextID
	e.idMu.Unlock()
	seed := e.cfg.Seed
	for _, t := range prompt {
		seed = seed*0x100000001b3 ^ uint64(t)
	}
	r := &Request{arrival: e.SimNow(), genSeed: mix64(seed), stopReason: stopReason, notify: make(chan struct{}, 1),
		forced: pieces, forcedIDs: ids, stopped: e.stopped}
	r.seq = NewSeq(id, prompt, maxTokens, e.cfg.BlockSize)
	r.seq.Owner = r
	r.seq.Session, r.seq.ReportFull = opts.Session, opts.ReportFull
	select {
	case e.submit <- r:
		return r, nil
	case <-e.stopped:
		return nil, ErrStopped
	}
}

// Cancel aborts r if it has not finished (client went away).
func (e *Engine) Cancel(r *Request) {
	r.mu.Lock()
	fin := r.finished
	r.mu.Unlock()
	if fin {
		return
	}
	select {
	case e.aborts <- r:
	case <-e.stopped:
	}
}

// Do runs f on the engine goroutine between steps and waits for it. KV events it causes
// (a reset's) go out with the next step's, as vLLM publishes them.
func (e *Engine) Do(f func(s *Scheduler)) error {
	done := make(chan struct{})
	select {
	case e.ctl <- func() { f(e.sched); e.OnStep(e.Snapshot()); close(done) }:
	case <-e.stopped:
		return ErrStopped
	}
	<-done
	return nil
}

// Run is the engine loop: schedule a step, wait its simulated duration
// (scaled to wall time against a monotonic clock, so no drift accumulates),
// apply its outputs. When idle it blocks on its channels. It returns when
// ctx ends.
func (e *Engine) Run(ctx context.Context) {
	defer close(e.stopped)
	for {
		if e.sched.Idle() {
			e.wasBusy = false
			select {
			case <-ctx.Done():
				return
			case r := <-e.submit:
				e.add(r)
			case r := <-e.aborts:
				e.abort(r)
			case f := <-e.ctl:
				f()
			}
			continue
		}
		e.drain()
		if e.sched.Idle() {
			continue
		}
		if e.sched.HasHostTier() {
			if !e.stepWithHost(ctx) {
				return
			}
			continue
		}
		b := e.sched.Schedule()
		dur := e.prof.StepSeconds(b.Cost())
		end := e.stepStart() + dur
		if !e.wait(ctx, end, false) {
			return
		}
		e.simT, e.busy, e.wasBusy = end, e.busy+dur, true
		e.apply(b, end)
	}
}

// stepWithHost is one loop iteration with the host-RAM KV tier: the
// scheduler learns the step's start first (transfers completed by then take
// effect) and its end after (the step's stores start then). A step with
// nothing to compute while loads or stores are in flight is not run: the
// engine waits for the next transfer to complete or a new request, as
// vLLM's engine polls its connector in empty steps. It returns false when
// ctx ended.
func (e *Engine) stepWithHost(ctx context.Context) bool {
	start := e.stepStart()
	e.sched.SetNow(start)
	b := e.sched.Schedule()
	if len(b.Items) == 0 {
		e.sched.StepEnd(start)
		if next, ok := e.sched.NextHostEvent(); ok {
			e.publish()
			if !e.wait(ctx, next, true) {
				return false
			}
			e.simT, e.wasBusy = max(start, min(next, e.SimNow())), false
			e.sched.SetNow(e.simT) // completed transfers show in the gauges even if the engine now idles
			e.publish()
			return true
		}
		if e.sched.Idle() { // it only flushed finished requests
			e.publish()
			return true
		}
	}
	dur := e.prof.StepSeconds(b.Cost())
	end := start + dur
	e.sched.StepEnd(end)
	if !e.wait(ctx, end, false) {
		return false
	}
	e.simT, e.busy, e.wasBusy = end, e.busy+dur, true
	e.apply(b, end)
	return true
}

// maxLateWall is how far behind wall time a busy engine may run and still
// catch up (timer wake-ups are late by a fraction of a millisecond each);
// beyond it the lost time counts as lag.
const maxLateWall = 20 * time.Millisecond

// stepStart is the simulated start of the next step: back to back with the
// previous one while the engine is busy and keeping up, else now.
func (e *Engine) stepStart() float64 {
	now := e.SimNow()
	if !e.wasBusy {
		return max(e.simT, now)
	}
	if late := now - e.simT; late > maxLateWall.Seconds()*e.cfg.TimeScale {
		e.lag += late
		return now
	}
	return e.simT
}

func (e *Engine) drain() {
	for {
		select {
		case r := <-e.submit:
			e.add(r)
		case r := <-e.aborts:
			e.abort(r)
		case f := <-e.ctl:
			f()
		default:
			return
		}
	}
}

// wait sleeps until wall time reaches simulated time t, queueing the
// requests that arrive meanwhile. During a step (wake false) they wait for
// the next one and aborts wait for the step's end; in an empty step
// waiting for a host transfer (wake true) the first request or abort ends
// the wait, since it may be work now. It returns false when ctx ended.
func (e *Engine) wait(ctx context.Context, t float64, wake bool) bool {
	d := time.Until(e.wallStart.Add(time.Duration(t / e.cfg.TimeScale * float64(time.Second))))
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	aborts := e.aborts
	if !wake {
		aborts = nil // never ready: aborts are applied between steps
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case r := <-e.submit:
			e.add(r)
			if wake {
				return true
			}
		case r := <-aborts:
			e.abort(r)
			return true
		case <-timer.C:
			return true
		}
	}
}

// add queues r unless it was aborted before it reached the engine.
func (e *Engine) add(r *Request) {
	r.mu.Lock()
	aborted := r.aborted
	r.mu.Unlock()
	if !aborted {
		e.sched.Add(r.seq)
	}
}

func (e *Engine) abort(r *Request) {
	r.mu.Lock()
	fin := r.finished
	r.finished, r.aborted = true, true
	r.mu.Unlock()
	if fin {
		return
	}
	e.sched.Abort(r.seq)
	e.OnDone("abort")
	e.publish()
}

// apply samples the step's tokens, publishes the snapshot and then hands the
// text to the handlers (first token at once, then every stream_interval).
func (e *Engine) apply(b Batch, now float64) {
	emitted, finished := e.sched.Complete(b, func(q *Seq) uint32 {
		r := q.Owner.(*Request)
		if i := q.Output; i < len(r.forcedIDs) {
			r.unsent = append(r.unsent, r.forced[i])
			return r.forcedIDs[i]
		}
		id, text := e.gen.token(r.genSeed, q.Output)
		r.unsent = append(r.unsent, text)
		return id
	})
	done := make(map[*Seq]bool, len(finished))
	for _, q := range finished {
		done[q] = true
	}
	for _, q := range emitted {
		if q.Output == 1 {
			e.OnTTFT(max(0, now-q.Owner.(*Request).arrival))
		}
	}
	for _, q := range finished {
		e.OnDone(q.Owner.(*Request).stopReason)
	}
	e.publish()
	for _, q := range emitted {
		r := q.Owner.(*Request)
		if q.Output != 1 && !done[q] && len(r.unsent) < e.cfg.StreamInterval {
			continue
		}
		r.mu.Lock()
		r.texts = append(r.texts, r.unsent...)
		r.finished = r.finished || done[q]
		r.mu.Unlock()
		r.unsent = r.unsent[:0]
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
}

// EnableKVEvents makes the scheduler record KV events and hands each step's to fn (as
// OnKVEvents). Call it before Run.
func (e *Engine) EnableKVEvents(fn func([]KVEvent)) {
	e.sched.EnableKVEvents()
	e.OnKVEvents = fn
}

// publish hands the KV events recorded since the last call to OnKVEvents, then the
// snapshot to OnStep. Engine goroutine only.
func (e *Engine) publish() {
	if e.OnKVEvents != nil {
		if evs := e.sched.TakeKVEvents(); len(evs) > 0 {
			e.OnKVEvents(evs)
		}
	}
	e.OnStep(e.Snapshot())
}

// Snapshot reads the scheduler's gauges and counters. Engine goroutine only.
func (e *Engine) Snapshot() Snapshot {
	return Snapshot{
		Running: e.sched.NumRunning(), Waiting: e.sched.NumWaiting(),
		KVUsage: e.sched.Pool().Usage(), Counters: e.sched.Counters, Host: e.sched.HostSnapshot(),
		BusySeconds: e.busy, LagSeconds: e.lag,
	}
}
