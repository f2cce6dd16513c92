package bench

import (
	"context"
	"sync"
	"time"
)

// runSeries plays stages back to back with one pool of sessions, as one
// continuous load (--carry; the reference ran one load per variant against
// engines that were never restarted). Moving to the next stage adds sessions,
// or retires the newest ones before their next turn, and the sessions already
// running keep their conversations: every stage after the first measures a
// steady mix of sessions at different turns rather than a lockstep start.
// Each stage's window opens after cfg.Warmup and lasts cfg.Stage; a turn
// belongs to the window it finishes in. After the last stage, in-flight turns
// get up to cfg.Drain. bar makes the progress display of a stage.
func (r *stageRun) runSeries(ctx context.Context, stages []int, bar func(n int) progress) ([]StageSummary, []TurnRecord) {
	r.stop = make(chan struct{})
	r.series = true
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var quits []chan struct{}
	resize := func(n int) {
		for len(quits) < n {
			q := make(chan struct{})
			quits = append(quits, q)
			wg.Add(1)
			go func() { defer wg.Done(); r.worker(runCtx, q) }()
		}
		for ; len(quits) > n; quits = quits[:len(quits)-1] {
			close(quits[len(quits)-1])
		}
	}
	var sums []StageSummary
	var all []TurnRecord
	for i, n := range stages {
		b := bar(n)
		r.mu.Lock()
		r.sessions, r.launched, r.start, r.end = n, r.now(), time.Time{}, time.Time{}
		r.mu.Unlock()
		w := r.window1(runCtx, b, func() { resize(n) })
		last := i == len(stages)-1 || ctx.Err() != nil
		if last {
			close(r.stop)
			b.describe("draining")
			drain := time.AfterFunc(r.cfg.wall(r.cfg.Drain), cancel)
			wg.Wait()
			drain.Stop()
		}
		b.finish()
		r.mu.Lock()
		turns, start, end := r.turns, r.start, r.end
		r.turns = nil
		r.mu.Unlock()
		sums = append(sums, r.summary(n, end.Sub(start), turns, w))
		all = append(all, turns...)
		if last {
			break
		}
	}
	return sums, all
}

// measured is what window1 saw of one measured window besides the turns:
// the polls, the counters before and after it, and the bench's own lag.
type measured struct {
	busy          []pollStat
	before, after sample
	err           error // reading the counters before the window
	lag           lagStats
}

// window1 runs one stage of a series: it samples the counters, starts (or
// retires) sessions with resize, waits out the warm-up (sampling again at
// its end), opens the measured window and polls until it closes, with the
// heartbeat that measures the bench's own lag running meanwhile.
func (r *stageRun) window1(ctx context.Context, bar progress, resize func()) (m measured) {
	if r.cfg.Warmup == 0 {
		m.before, m.err = r.target.Sample(ctx)
	}
	resize()
	if r.cfg.Warmup > 0 {
		bar.describe("warming up")
		sleepUntil(ctx, r.launched.Add(r.cfg.wall(r.cfg.Warmup)))
		m.before, m.err = r.target.Sample(ctx)
	}
	if m.err != nil {
		r.log.Warn("cannot read engine counters", "err", m.err)
	}
	r.mu.Lock()
	r.start = r.now()
	r.end = r.start.Add(r.cfg.wall(r.cfg.Stage))
	r.mu.Unlock()
	hb := startHeartbeat(heartbeatPeriod)
	m.busy, m.after = r.poll(ctx, bar)
	m.lag = hb.stop()
	return m
}
