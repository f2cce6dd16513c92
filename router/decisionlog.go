package router

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/lmwarden/warden/router/decision"
)

// The decision log's writer (--decision-log): one JSON line per routed
// request, for tuning the placement offline and for joining with `warden
// bench`'s per-turn table by request id; the line's schema and encoding are
// router/decision's. The request path never touches the disk: account hands
// a decision.Record (a small struct) to a bounded channel and goes on; one
// writer goroutine wakes every decisionFlush, encodes what is there and
// writes it in batches of whole lines to a size-rotated file (lumberjack).
// When the channel is full the line is dropped and counted
// (warden_decision_log_dropped_total, and a warning at most once a minute).

const (
	decisionBuffer       = 4096                   // decisions waiting for the writer's next tick; more are dropped
	decisionBatch        = 64 << 10               // bytes of whole lines written at once
	decisionFlush        = 100 * time.Millisecond // the writer's tick (a real timer: I/O)
	decisionBackups      = 3                      // rotated files kept besides the current one
	defaultDecisionMaxMB = 100
	dropWarnEvery        = time.Minute // a warning of each kind (drops, write errors) at most this often
)

// decisionLog is the bounded buffer and its writer goroutine.
type decisionLog struct {
	ch      chan decision.Record
	w       io.WriteCloser
	log     *slog.Logger
	clock   func() time.Time
	dropped atomic.Uint64
	closed  atomic.Bool
	warned  atomic.Int64 // unix nanoseconds of the last drop warning
	failed  atomic.Int64 // ... of the last write error warning
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	err     error // the first write or close error, read after done
}

// openDecisionLog opens (or creates) path at once, so that a bad path fails
// the start, and returns the writer rotating it at maxMB.
func openDecisionLog(path string, maxMB int) (io.WriteCloser, error) {
	if maxMB <= 0 {
		maxMB = defaultDecisionMaxMB
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	f.Close()
	return &lumberjack.Logger{Filename: path, MaxSize: maxMB, MaxBackups: decisionBackups}, nil
}

// newDecisionLog starts the writer over w with room for size decisions.
func newDecisionLog(w io.WriteCloser, size int, log *slog.Logger, clock func() time.Time) *decisionLog {
	l := &decisionLog{ch: make(chan decision.Record, size), w: w, log: log, clock: clock,
		stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// register exposes the drop count on reg.
func (l *decisionLog) register(reg prometheus.Registerer) error {
	c := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "warden_decision_log_dropped_total",
		Help: "Decision log lines dropped because the writer fell behind (--decision-log).",
	}, func() float64 { return float64(l.dropped.Load()) })
	return reg.Register(c)
}

// add hands d to the writer without blocking; a full buffer drops it.
func (l *decisionLog) add(d decision.Record) {
	if l.closed.Load() {
		return // after shutdown: a request that outlived the drain
	}
	select {
	case l.ch <- d:
	default:
		if n := l.dropped.Add(1); warnDue(&l.warned, l.clock()) {
			l.log.Warn("decision log is behind: lines dropped", "dropped_total", n)
		}
	}
}

// warnDue reports whether a warning last given at *last (unix nanoseconds, 0
// = never) may be given again now, at most once per dropWarnEvery, and
// books it.
func warnDue(last *atomic.Int64, now time.Time) bool {
	prev := last.Load()
	return (prev == 0 || now.UnixNano()-prev >= int64(dropWarnEvery)) && last.CompareAndSwap(prev, now.UnixNano())
}

// run encodes and writes the decisions every tick, in batches of whole
// lines (a rotation never splits a line), until stop; then it writes what
// is left and closes the file.
func (l *decisionLog) run() {
	defer close(l.done)
	var buf []byte
	write := func() {
		if len(buf) == 0 {
			return
		}
		if _, err := l.w.Write(buf); err != nil {
			l.fail(err)
		}
		buf = buf[:0]
	}
	appendOne := func(d decision.Record) { buf = append(d.AppendJSON(buf), '\n') }
	drain := func() { // what is there now; later lines wait for the next tick
		for n := len(l.ch); n > 0; n-- {
			appendOne(<-l.ch)
			if len(buf) >= decisionBatch {
				write()
			}
		}
		write()
	}
	// The writer wakes on its own tick, not per line: a request's hand-off
	// is a buffered send that wakes no goroutine.
	tick := time.NewTicker(decisionFlush)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			drain()
		case <-l.stop:
			drain()
			if err := l.w.Close(); err != nil {
				l.fail(err)
			}
			return
		}
	}
}

// fail keeps the first error and warns (at most once a minute).
func (l *decisionLog) fail(err error) {
	if l.err == nil {
		l.err = err
	}
	if warnDue(&l.failed, l.clock()) {
		l.log.Warn("decision log write failed", "error", err)
	}
}

// close writes what is buffered, closes the file and reports the first
// write error; later calls return the same.
func (l *decisionLog) close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		close(l.stop)
	})
	<-l.done
	return l.err
}

// CloseDecisionLog writes the decision log's buffered lines and closes it
// (nothing when it is off). Call it after the HTTP server has shut down;
// requests that end later are not logged. It reports the first write error.
func (c *Core) CloseDecisionLog() error {
	if c.decisions == nil {
		return nil
	}
	err := c.decisions.close()
	if n := c.decisions.dropped.Load(); n > 0 {
		c.log.Warn("decision log lines dropped in this run", "dropped", n)
	}
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return nil
}

// startDecisionLog opens Config.DecisionLog when set (New calls it).
func (c *Core) startDecisionLog() error {
	if c.cfg.DecisionLog == "" {
		return nil
	}
	w, err := openDecisionLog(c.cfg.DecisionLog, c.cfg.DecisionLogMaxMB)
	if err != nil {
		return err
	}
	c.decisions = newDecisionLog(w, decisionBuffer, c.log, c.clock)
	if err := c.decisions.register(c.cfg.Registry); err != nil {
		return errors.Join(fmt.Errorf("router: decision log metric: %w", err), c.decisions.close())
	}
	return nil
}
