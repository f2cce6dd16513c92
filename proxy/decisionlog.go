package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/natefinch/lumberjack.v2"
)

// The decision log (--decision-log): one JSON line per routed request, for
// tuning the placement offline and for joining with `warden bench`'s
// per-turn table by request id. The request path never touches the disk:
// account hands a decision (a small struct) to a bounded channel and goes
// on; one writer goroutine wakes every decisionFlush, encodes what is
// there and writes it in batches of whole lines to a size-rotated file
// (lumberjack). When the channel is full the line is dropped and counted
// (warden_decision_log_dropped_total, and a warning at most once a minute).

// RequestIDHeader is the client's request id, recorded in the decision log
// as it was sent (cut to maxRequestID bytes); the warden makes none up.
const RequestIDHeader = "X-Request-Id"

const (
	maxRequestID         = 128                    // longer ids are cut
	decisionBuffer       = 4096                   // decisions waiting for the writer's next tick; more are dropped
	decisionBatch        = 64 << 10               // bytes of whole lines written at once
	decisionFlush        = 100 * time.Millisecond // the writer's tick (a real timer: I/O)
	decisionBackups      = 3                      // rotated files kept besides the current one
	defaultDecisionMaxMB = 100
	dropWarnEvery        = time.Minute // a warning of each kind (drops, write errors) at most this often
)

// decision is one routed request as the request path hands it over; the
// writer encodes it (the session key is hashed there, never written).
type decision struct {
	at         time.Time
	requestID  string
	source     string
	key        string // the placement key: hashed into the line
	subagent   bool
	policy     string
	route      string
	replica    int
	wait       time.Duration // held at the warden (place.ReasonWait) before placement
	prompt     uint64
	cached     uint64
	completion uint64
	ttfb       time.Duration // < 0: no response byte
	duration   time.Duration
	status     int
}

// DecisionLine is the decision log's line format (one JSON object a line).
// Session is a short hash of the placement key (the raw key may be a
// person's id); it tells conversations apart within a log and across
// restarts, nothing more. TTFBS is -1 when no response byte arrived.
type DecisionLine struct {
	Time       string  `json:"time"` // RFC 3339 with nanoseconds, the proxy's clock, when the request ended
	RequestID  string  `json:"request_id"`
	Source     string  `json:"session_source"`
	Session    string  `json:"session"`
	Subagent   bool    `json:"subagent"`
	Policy     string  `json:"policy"`
	Route      string  `json:"route"`
	Replica    int     `json:"replica"`
	WaitS      float64 `json:"queue_wait_s"`
	Prompt     uint64  `json:"prompt_tokens"`
	Cached     uint64  `json:"cached_tokens"`
	Completion uint64  `json:"completion_tokens"`
	TTFBS      float64 `json:"ttfb_s"`
	DurationS  float64 `json:"duration_s"`
	Status     int     `json:"status"`
}

// appendJSON appends d as one DecisionLine object, byte for byte as
// encoding/json writes it, without reflection (the writer's cost per line).
func (d *decision) appendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = d.at.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = appendJSONString(b, d.requestID)
	b = append(b, `,"session_source":`...)
	b = appendJSONString(b, d.source)
	b = append(b, `,"session":"`...)
	if d.key != "" {
		h := sha256.Sum256([]byte(d.key))
		b = hex.AppendEncode(b, h[:6])
	}
	b = append(b, `","subagent":`...)
	b = strconv.AppendBool(b, d.subagent)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, d.policy)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, d.route)
	b = append(b, `,"replica":`...)
	b = strconv.AppendInt(b, int64(d.replica), 10)
	b = append(b, `,"queue_wait_s":`...)
	b = appendJSONFloat(b, d.wait.Seconds())
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendUint(b, d.prompt, 10)
	b = append(b, `,"cached_tokens":`...)
	b = strconv.AppendUint(b, d.cached, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendUint(b, d.completion, 10)
	b = append(b, `,"ttfb_s":`...)
	if d.ttfb >= 0 {
		b = appendJSONFloat(b, d.ttfb.Seconds())
	} else {
		b = append(b, "-1"...)
	}
	b = append(b, `,"duration_s":`...)
	b = appendJSONFloat(b, d.duration.Seconds())
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(d.status), 10)
	return append(b, '}')
}

// appendJSONString appends s quoted: plain printable ASCII as it is, any
// other string (a client's request id may hold anything) through
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json does (shortest form; the
// exponent form below 1e-6, without a leading zero in the exponent).
func appendJSONFloat(b []byte, f float64) []byte {
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// decisionLog is the bounded buffer and its writer goroutine.
type decisionLog struct {
	ch      chan decision
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
	l := &decisionLog{ch: make(chan decision, size), w: w, log: log, clock: clock,
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
func (l *decisionLog) add(d decision) {
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
	appendOne := func(d decision) { buf = append(d.appendJSON(buf), '\n') }
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
func (p *Proxy) CloseDecisionLog() error {
	if p.decisions == nil {
		return nil
	}
	err := p.decisions.close()
	if n := p.decisions.dropped.Load(); n > 0 {
		p.log.Warn("decision log lines dropped in this run", "dropped", n)
	}
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return nil
}

// startDecisionLog opens Config.DecisionLog when set (New calls it).
func (p *Proxy) startDecisionLog() error {
	if p.cfg.DecisionLog == "" {
		return nil
	}
	w, err := openDecisionLog(p.cfg.DecisionLog, p.cfg.DecisionLogMaxMB)
	if err != nil {
		return err
	}
	p.decisions = newDecisionLog(w, decisionBuffer, p.log, p.clock)
	if err := p.decisions.register(p.cfg.Registry); err != nil {
		return errors.Join(fmt.Errorf("proxy: decision log metric: %w", err), p.decisions.close())
	}
	return nil
}

// logDecision books one accounted request in the decision log (account
// calls it; nothing when the log is off).
func (p *Proxy) logDecision(at *attempt, req *request, pl placement, start time.Time, prompt, cached, completion uint64) {
	if p.decisions == nil {
		return
	}
	now := p.clock()
	d := decision{at: now, requestID: req.id, source: req.key.Source, key: req.key.Key, subagent: req.key.Subagent,
		policy: pl.policy, route: string(pl.d.Reason), replica: at.rep.rank, wait: pl.waited,
		prompt: prompt, cached: cached, completion: completion, ttfb: -1, duration: now.Sub(start), status: at.status}
	if at.tap != nil && !at.tap.FirstByte().IsZero() {
		d.ttfb = at.tap.FirstByte().Sub(start)
	}
	p.decisions.add(d)
}
