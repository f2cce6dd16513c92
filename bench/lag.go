package bench

import (
	"slices"
	"sync"
	"time"
)

// The bench's own lag. A measured turn is the client's truth only when the
// client reads its stream when the bytes arrive; a client starved of CPU
// (a host whose cores the engines hold, the bench's own garbage collection)
// adds its lateness to every TTFB it reports. So during every measured window
// a heartbeat asks to be woken every heartbeatPeriod and records how late it
// woke. A heartbeat rather than Go's runtime/metrics scheduler-latency
// histogram (/sched/latencies:seconds): that histogram counts only the time
// a runnable goroutine waits for one of Go's threads, not the time the
// kernel keeps the process's threads off a CPU nor a stop-the-world pause
// before the wake-up, and those are what delay a read of the response on a
// busy host. A timer's wake-up passes through all of them, as a socket
// read's does.
const heartbeatPeriod = 10 * time.Millisecond

// lagWarnMultiple: a stage whose TTFB p95 is no more than this many times the
// bench's lag (p99) is flagged: the client may set its tail.
const lagWarnMultiple = 3

// lagStats summarizes one window's heartbeat lateness (wall time).
type lagStats struct {
	N             int
	P50, P99, Max time.Duration
}

// heartbeat records how late a timer of period wakes until stopped.
type heartbeat struct {
	period time.Duration
	quit   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	late   []time.Duration
}

func startHeartbeat(period time.Duration) *heartbeat {
	h := &heartbeat{period: period, quit: make(chan struct{}), done: make(chan struct{})}
	go h.run()
	return h
}

func (h *heartbeat) run() {
	defer close(h.done)
	t := time.NewTimer(h.period)
	defer t.Stop()
	due := time.Now().Add(h.period)
	for {
		select {
		case <-h.quit:
			return
		case <-t.C:
		}
		now := time.Now()
		h.mu.Lock()
		h.late = append(h.late, max(now.Sub(due), 0))
		h.mu.Unlock()
		due = now.Add(h.period)
		t.Reset(h.period)
	}
}

// stop ends the heartbeat and summarizes its lateness.
func (h *heartbeat) stop() lagStats {
	close(h.quit)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return summarizeLag(h.late)
}

// summarizeLag returns the quantiles of late (sorted in place); zero with no
// samples.
func summarizeLag(late []time.Duration) lagStats {
	if len(late) == 0 {
		return lagStats{}
	}
	slices.Sort(late)
	xs := make([]float64, len(late))
	for i, d := range late {
		xs[i] = float64(d)
	}
	at := func(q float64) time.Duration { return time.Duration(quantile(xs, q)) }
	return lagStats{N: len(late), P50: at(0.50), P99: at(0.99), Max: late[len(late)-1]}
}

// lagWarning is the warning for a stage whose TTFB tail is within the
// bench's own lag, "" when it is not or either is unknown.
func (s *StageSummary) lagWarning() string {
	if s.TTFBP95 == nil || s.BenchLagP99 == nil || *s.BenchLagP99 <= 0 || *s.TTFBP95 > lagWarnMultiple**s.BenchLagP99 {
		return ""
	}
	return "this stage's p95 is within the bench's own lag: the client, not the server, may set it"
}
