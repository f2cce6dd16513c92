package bench

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// TurnRecord is one turn's sample. Times are simulated seconds (wall time x
// time scale); StartS is measured from the stage start.
type TurnRecord struct {
	Variant      string  `json:"variant"`
	Sessions     int     `json:"sessions"` // the stage's concurrency
	Session      int     `json:"session"`  // sequence number within the stage
	SessionID    string  `json:"session_id"`
	Turn         int     `json:"turn"` // 1 = first message (a subagent's: its task message)
	StartS       float64 `json:"start_s"`
	TTFBS        float64 `json:"ttfb_s"` // -1 when no content token arrived
	DurationS    float64 `json:"duration_s"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Replica      string  `json:"replica,omitempty"`
	Stayed       *bool   `json:"stayed,omitempty"` // follow-up turns (and every subagent turn) against a warden: served by the session's first replica
	InStage      bool    `json:"in_stage"`         // finished before the stage end (counted in the summary)
	LastTurn     bool    `json:"last_turn"`        // finished the session (a subagent's: finished the subagent)
	Error        string  `json:"error,omitempty"`
	// Canceled marks a turn the bench ended itself (Ctrl-C, or the end of
	// the stage's drain): not a failure of the server; Error says how.
	Canceled bool `json:"canceled,omitempty"`
	// Subagent marks a subagent's turn (--subagents): Session, SessionID
	// and Variant are its parent's, AgentID its own x-claude-code-agent-id.
	Subagent bool   `json:"subagent,omitempty"`
	AgentID  string `json:"agent_id,omitempty"`
}

// stageRun is one stage of one variant: `sessions` closed-loop sessions for
// the stage's duration.
type stageRun struct {
	cfg      *Config
	hc       *http.Client
	target   *Target
	log      *slog.Logger
	model    string
	system   string
	deviceID string
	variant  string
	sessions int  // the stage's concurrency; written under mu in a series
	series   bool // sessions carry over between stages (runSeries)
	now      func() time.Time
	// agentSystem is the subagents' shared system prompt (--subagents).
	agentSystem string

	stop     chan struct{} // closed at the stage end: no new turns
	launched time.Time     // wall clock: sessions started
	// start and end bound the measured window (after the warm-up); written
	// under mu once the warm-up is over.
	start, end time.Time
	seq        atomic.Int64 // next session sequence number
	inflight   atomic.Int64
	completed  atomic.Int64 // turns finished, for the progress bar

	mu    sync.Mutex
	turns []TurnRecord
}

func (r *stageRun) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// sim converts a wall-clock duration to simulated seconds.
func (r *stageRun) sim(d time.Duration) float64 {
	return d.Seconds() * r.cfg.TimeScale
}

// closed reports whether quit is closed (a nil quit never is).
func closed(quit <-chan struct{}) bool {
	select {
	case <-quit:
		return true
	default:
		return false
	}
}

// worker runs sessions back to back until the stage ends or quit closes: a
// finished session is replaced by a new one (closed loop).
func (r *stageRun) worker(ctx context.Context, quit <-chan struct{}) {
	for !r.stopped() && !closed(quit) && ctx.Err() == nil {
		r.runSession(ctx, int(r.seq.Add(1)-1), quit)
	}
}

// sessionText returns the k-th session's user messages (named by
// r.stream(k)) and its follow-up turns.
func (r *stageRun) sessionText(k int) (*sessionText, int) {
	sizes, turns := r.cfg.shape(k)
	return newSessionText(r.cfg.Seed, sizes, r.stream(k)...), turns
}

// runSession plays one session: first message, then cfg.Turns follow-ups,
// each carrying the assistant's previous reply exactly as received. It
// gives up before the next turn when the stage ends or quit closes. With
// --tool-time it pauses between a turn's answer and the next turn; with
// --subagents a spawning session runs its subagents after the first turn,
// waits for them, and sends their final replies as its second turn's user
// message (instead of the follow-up text, as a tool result).
func (r *stageRun) runSession(ctx context.Context, k int, quit <-chan struct{}) {
	text, turns := r.sessionText(k)
	id := newUUID()
	billing := ""
	if r.cfg.BillingHeader && r.cfg.API != APIOpenAI {
		billing = billingLine(id)
	}
	conv := newConversation(r.cfg.API, r.model, r.system, id, r.deviceID, billing, r.cfg.MaxTokens)
	home := ""
	spawn := turns > 0 && r.cfg.spawns(r.stream(k))
	results, haveResults := "", false
	for turn := 1; turn <= 1+turns; turn++ {
		if r.stopped() || closed(quit) {
			return
		}
		msg := text.next() // drawn even when replaced, so later turns send the same text as without subagents
		if haveResults && results != "" {
			msg = results
		}
		haveResults = false
		conv.add("user", msg)
		r.inflight.Add(1)
		res := doTurn(ctx, r.hc, r.target.URL, conv, r.cfg.wall(r.cfg.RTT), r.now)
		r.inflight.Add(-1)
		r.completed.Add(1)
		if turn == 1 {
			home = res.Replica
		}
		r.record(k, id, "", turn, res, home, turn == 1+turns)
		if res.Err != nil {
			r.log.Debug(turnEnd(res), "session", k, "turn", turn, "err", res.Err)
			r.backoff()
			return
		}
		conv.add("assistant", res.Text)
		if turn == 1 && spawn {
			// The subagents are this turn's tool: no tool time on top.
			if results, haveResults = r.runSubagents(ctx, k, id, home, quit); !haveResults {
				return
			}
		} else if turn <= turns && !r.pause(ctx, quit, k, -1, turn) {
			return
		}
	}
}

// backoff waits a little after a failed turn so a dead server is not hammered.
func (r *stageRun) backoff() {
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-r.stop:
	case <-t.C:
	}
}

// window returns the measured window (during the warm-up: the one it will
// be) and the stage's concurrency.
func (r *stageRun) window() (start, end time.Time, sessions int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start.IsZero() {
		start = r.launched.Add(r.cfg.wall(r.cfg.Warmup))
		return start, start.Add(r.cfg.wall(r.cfg.Stage)), r.sessions
	}
	return r.start, r.end, r.sessions
}

// record books one turn; agent is the subagent's id ("" = the session's own
// turn), home the replica of the session's first turn.
func (r *stageRun) record(k int, id, agent string, turn int, res turnResult, home string, last bool) {
	start, end, sessions := r.window()
	rec := TurnRecord{
		Subagent: agent != "", AgentID: agent,
		Variant: r.variant, Sessions: sessions, Session: k, SessionID: id, Turn: turn,
		StartS:       r.sim(res.Start.Sub(start)),
		TTFBS:        -1,
		DurationS:    r.sim(res.End.Sub(res.Start)),
		PromptTokens: res.PromptTokens, CachedTokens: res.CachedTokens, OutputTokens: res.OutputTokens,
		Replica:  res.Replica,
		InStage:  !res.End.Before(start) && !res.End.After(end),
		LastTurn: last && res.Err == nil,
	}
	if !res.FirstToken.IsZero() {
		rec.TTFBS = r.sim(res.FirstToken.Sub(res.Start))
	}
	if (turn > 1 || agent != "") && home != "" && res.Replica != "" && res.Err == nil {
		stayed := res.Replica == home
		rec.Stayed = &stayed
	}
	if res.Err != nil {
		rec.Error = res.Err.Error()
		rec.Canceled = res.Canceled
		rec.LastTurn = false
	}
	r.mu.Lock()
	r.turns = append(r.turns, rec)
	r.mu.Unlock()
}

// run plays the stage and returns its summary and turn samples. Sessions
// start together; the measured window opens after cfg.Warmup. It blocks
// until every session goroutine has returned: in-flight turns get up to
// cfg.Drain after the stage end, then they are canceled.
func (r *stageRun) run(ctx context.Context, bar progress) (StageSummary, []TurnRecord) {
	r.stop = make(chan struct{})
	r.mu.Lock()
	r.launched = r.now()
	r.mu.Unlock()
	warmEnd := r.launched.Add(r.cfg.wall(r.cfg.Warmup))
	runCtx, cancel := context.WithDeadline(ctx, warmEnd.Add(r.cfg.wall(r.cfg.Stage+r.cfg.Drain)))
	defer cancel()
	var wg sync.WaitGroup
	w := r.window1(runCtx, bar, func() {
		for i := 0; i < r.sessions; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); r.worker(runCtx, nil) }()
		}
	})
	close(r.stop)
	bar.describe("draining")
	wg.Wait()
	bar.finish()

	return r.summary(r.sessions, r.end.Sub(r.start), r.turns, w), r.turns
}

// summary is the row of a stage of n sessions whose measured window lasted
// window (wall time): its turns, its polls, the engines' counter deltas and
// the bench's own lag (in simulated seconds, as the TTFB it may inflate).
func (r *stageRun) summary(n int, window time.Duration, turns []TurnRecord, w measured) StageSummary {
	hits, queries, hostHits, ok := prefixDelta(w.before, w.after)
	ok = ok && w.err == nil && w.after != nil
	s := summarize(r.variant, n, r.sim(window), turns, busyCounts(w.busy), hits, queries, ok)
	if ok && hostHits > 0 && queries > 0 {
		s.HostHitPct = ptr(100 * hostHits / queries)
	}
	s.addEngineStats(w.busy, w.before, w.after, w.err == nil)
	if w.lag.N > 0 {
		s.BenchLagP50, s.BenchLagP99, s.BenchLagMax = ptr(r.sim(w.lag.P50)), ptr(r.sim(w.lag.P99)), ptr(r.sim(w.lag.Max))
		s.LagWarning = s.lagWarning()
	}
	return s
}

// sleepUntil waits until t or the end of ctx.
func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// poll samples the target until the stage end, updating the progress bar,
// and returns every poll's load and the last sample (at the end).
func (r *stageRun) poll(ctx context.Context, bar progress) ([]pollStat, sample) {
	every := max(r.cfg.wall(r.cfg.Poll), 50*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	endTimer := time.NewTimer(time.Until(r.end))
	defer endTimer.Stop()
	var busy []pollStat
	for {
		select {
		case <-ctx.Done():
			return busy, nil
		case <-endTimer.C:
			s, err := r.target.Sample(ctx)
			if err != nil {
				r.log.Warn("cannot read engine counters at stage end", "err", err)
				return busy, nil
			}
			return busy, s
		case <-tick.C:
			bar.set(r.now().Sub(r.start), int(r.completed.Load()), int(r.inflight.Load()))
			if s, err := r.target.Sample(ctx); err == nil {
				busy = append(busy, s.stat())
			}
		}
	}
}

// turnEnd names how a turn that did not finish ended, for the log.
func turnEnd(res turnResult) string {
	if res.Canceled {
		return "turn canceled"
	}
	return "turn failed"
}
