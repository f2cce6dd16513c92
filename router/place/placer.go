package place

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Placer owns the placement of one router: the decision state (the policy
// in force, the random source, the session table, the adaptive Memory, the
// requests held for room, the vLLM-style balancers' stale view and the
// sticky-share counts) under its own lock, and the replicas that placement
// considers. The router core (for every data plane) and the replay
// harness both place through it: Place (or Decide) for a request, End when the request is over.
//
// Lock order: the Placer's lock before a replica's own (a decision reads
// every replica's View under it); nothing else is taken under it, and none
// of its methods may be called from a Replica's methods.
type Placer[R Replica] struct {
	clock    func() time.Time
	interval time.Duration // on-demand balancer refresh when no tick runs; 0 = never
	override func(Request, Decision, []ReplicaView, SessionView) Decision

	mu          sync.Mutex
	cfg         Config // Policy switches at run time (SetPolicy)
	rng         Rand
	sessions    *Table
	mem         *Memory
	reps        []R           // the replicas placement considers, in rank order
	bal         []balancer    // their balancer view, index for index
	snap        []ReplicaView // the decision's snapshot, reused (only under mu)
	held        int           // requests held for room (ReasonWait) now
	wake        chan struct{} // closed and replaced when a request ends while some are held
	lastRefresh time.Time
	ticking     bool   // TickBalancers refreshes the balancer view on its own tick
	scanStart   int    // where the vLLM-style balancers start their scan (SessionView.ScanStart)
	knownTurns  uint64 // turns of sessions that already had a home
	homeTurns   uint64 // ... served on that home
}

// Replica is one replica as a Placer sees it. Its methods are called under
// the Placer's lock and must not call the Placer.
type Replica interface {
	Rank() int
	// View is the replica's state for a decision: rank, health, its exact
	// in-flight count, max_num_seqs and the latest scraped engine state.
	// The Placer fills in ActiveSessions, the balancer view and the
	// adaptive estimates.
	View(now time.Time) ReplicaView
	// Sent counts one more request in flight on it. The Placer calls it in
	// the decision's critical section, so that a burst cannot herd onto one
	// replica; the caller takes it off when the request has ended (after
	// End).
	Sent()
}

// balancer is one replica's view for the vLLM-style balancers: running and
// waiting as of the last refresh, and requests sent since.
type balancer struct {
	running, waiting, sent int
}

// PlacerConfig configures a Placer.
type PlacerConfig struct {
	Config                         // the policy and its knobs
	SessionTTL       time.Duration // idle sessions expire after this; <= 0 never
	MaxSessions      int           // bound of the session table and of Memory; <= 0: no table bound, Memory's default
	BalancerInterval time.Duration // a decision refreshes the balancer view older than this unless TickBalancers runs; 0 = only on RefreshBalancers or the tick
	Grace            float64       // Memory.Grace; 0 = its default, < 0 = none
	ActiveWindow     time.Duration // a fixed active window for the table (Table.FixWindow); 0 = follow the gaps between turns
	Clock            func() time.Time
	Rand             Rand // tie breaks
	// Override is an experiment's change to the policy's decision, called
	// with the snapshot and session view it was made on (the replay's
	// imposed homes and conversation slots); a ReasonWait result holds the
	// request. nil in the warden.
	Override func(Request, Decision, []ReplicaView, SessionView) Decision
}

// NewPlacer returns a Placer over no replicas (SetReplicas adds them).
func NewPlacer[R Replica](c PlacerConfig) *Placer[R] {
	p := &Placer[R]{clock: c.Clock, interval: c.BalancerInterval, override: c.Override,
		cfg: c.Config, rng: c.Rand, sessions: NewTable(c.SessionTTL, c.MaxSessions),
		mem: NewMemory(c.MaxSessions), wake: make(chan struct{})}
	if p.clock == nil {
		p.clock = time.Now
	}
	if c.Grace != 0 {
		p.mem.Grace = max(c.Grace, 0)
	}
	if c.ActiveWindow > 0 {
		p.sessions.FixWindow(c.ActiveWindow)
	}
	return p
}

// Request is what a decision knows of one request.
type Request struct {
	Key       string // the placement key; "" = no session identified
	Subagent  bool   // a subagent's conversation of its own (counted as one in the table)
	Pinned    bool   // the client pinned it to Pin (X-Warden-Replica)
	Pin       int
	Skip      []int         // ranks treated as unavailable (a retry)
	BodyBytes int           // the request body's size (the adaptive policy's token estimate)
	Waited    time.Duration // how long it has been held so far
	Held      bool          // Decide: the caller holds it after an earlier ReasonWait (it counts among the held until placed)
	// Resident is the engines' truth about the conversation's prefix, one
	// entry per replica whose KV events flow (router/ledger); nil: the
	// estimate alone (Memory) decides where it is.
	Resident []Resident
}

// Placement is one decision and what the end of the request needs.
type Placement[R Replica] struct {
	Decision
	Replica R             // the chosen replica (zero when Rank < 0)
	Known   bool          // the session was in the table before this request
	Home    int           // its home after the decision (-1 none)
	Policy  string        // the policy that decided
	Waited  time.Duration // held before this decision (Place)
	// PrefixOn is where the conversation's prefix was believed to be when
	// it was placed (the engines' truth where it flows, else the estimate or
	// the home); -1 nowhere or unknown. Adopted: the truth gave the
	// conversation its home (the table did not know it, or knew another).
	PrefixOn int
	Adopted  bool
	// PrevContext and PrevTurns are the conversation's context after its
	// last turn (prompt + completion tokens as the engine reported them; 0
	// unknown) and the turns that ended before this one.
	PrevContext, PrevTurns int
	// Note is the caller's own record of the placement, carried to its end
	// (the router core's reading of the engines' truth).
	Note   any
	key    string
	ticket *Ticket
}

// MaxHold bounds one request's hold whatever the policy says (a safety
// net: the policy's own bound is a few turn times); past it the policy is
// told not to hold it any longer (SessionView.NoWait).
const MaxHold = 10 * time.Minute

// holdRecheck is how often a held request asks again without a wake-up.
const holdRecheck = time.Second

// Place decides where req goes; when the policy says wait it holds the
// request (counted among the held) and asks again whenever a request ends
// (at least every second), until it is placed or ctx ends: then it returns
// the wait decision.
func (p *Placer[R]) Place(ctx context.Context, req Request) Placement[R] {
	start := p.clock()
	var t *time.Timer
	for {
		req.Waited = p.clock().Sub(start)
		p.mu.Lock()
		pl := p.decide(req)
		wake := p.wake
		p.mu.Unlock()
		if pl.Reason != ReasonWait {
			if req.Held {
				pl.Waited = req.Waited
			}
			return pl
		}
		req.Held = true
		if t == nil {
			t = time.NewTimer(holdRecheck)
			defer t.Stop()
		} else {
			t.Reset(holdRecheck)
		}
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.held--
			p.mu.Unlock()
			return pl
		case <-wake:
		case <-t.C:
		}
	}
}

// Decide makes one decision for req without holding it: a ReasonWait
// answer is the caller's to hold (asking again with req.Held set).
func (p *Placer[R]) Decide(req Request) Placement[R] {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.decide(req)
}

// decide makes one decision in one critical section: view takes the
// snapshot the policy decides on, pick asks the policy, and commit counts
// the request in flight on the chosen replica, updates the session table
// and begins the adaptive policy's record, so that a burst cannot herd onto
// one replica. The caller holds p.mu.
func (p *Placer[R]) decide(req Request) Placement[R] {
	now := p.clock()
	s, snap, sv := p.view(req, now)
	d := p.pick(req, snap, sv)
	return p.commit(req, d, s, snap, sv, now)
}

// view is what a decision for req sees at now: its session (nil when new;
// touching it, after expiring idle ones), every replica's view with the
// session counts, the balancer view and the retry's skipped ranks filled
// in, and the session's view (with the adaptive estimates under that
// policy). The snapshot is p.snap, valid until the next view. The caller
// holds p.mu.
func (p *Placer[R]) view(req Request, now time.Time) (*Session, []ReplicaView, SessionView) {
	var s *Session
	if req.Key != "" {
		s = p.sessions.Get(req.Key, now)
	}
	snap := p.snap[:0]
	for _, r := range p.reps {
		snap = append(snap, r.View(now))
	}
	p.snap = snap
	if !p.ticking && p.interval > 0 && now.Sub(p.lastRefresh) >= p.interval {
		p.refresh(snap, now) // no tick running (tests): refresh on demand
	}
	for i := range snap {
		v, b := &snap[i], p.bal[i]
		v.ActiveSessions = p.sessions.Active(v.Rank)
		v.StaleRunning, v.StaleWaiting, v.SentSince = b.running, b.waiting, b.sent
		if slices.Contains(req.Skip, v.Rank) {
			v.Healthy = false
		}
	}
	sv := SessionView{Key: req.Key, Pinned: req.Pinned, Pin: req.Pin, ScanStart: p.scanStart}
	if s != nil && s.Home() >= 0 { // a home whose cache was wiped is no home (Wiped)
		sv.Known, sv.Home = true, s.Home()
	}
	p.mem.SetPolicy(p.cfg.Policy) // Memory learns under every policy; only adaptive reads its view
	sv.ResidentOn = -1
	if p.cfg.Policy == PolicyAdaptive {
		p.mem.FillView(snap, now)
		p.mem.ViewSession(&sv, req.BodyBytes, snap)
		sv.Waited = req.Waited.Seconds()
		sv.Held = p.held
		sv.NoWait = req.Waited > MaxHold
	} else if sv.Known {
		sv.ResidentOn = sv.Home
	}
	sv.adopted = applyTruth(&sv, req.Resident) >= 0
	return s, snap, sv
}

// pick is the policy's decision on the view, changed by the experiment's
// Override when there is one. It changes nothing. The caller holds p.mu.
func (p *Placer[R]) pick(req Request, snap []ReplicaView, sv SessionView) Decision {
	d := Pick(snap, sv, p.cfg, p.rng)
	if p.override != nil {
		d = p.override(req, d, snap, sv)
	}
	return d
}

// commit records decision d for req, made on snap with session s (nil when
// new): a wait counts the request among the held; a chosen replica gets it
// in flight (Replica.Sent), the balancers count it sent and rotate their
// scan start, the session table learns its home and Memory begins its
// record. The caller holds p.mu.
func (p *Placer[R]) commit(req Request, d Decision, s *Session, snap []ReplicaView, sv SessionView, now time.Time) Placement[R] {
	pl := Placement[R]{Decision: d, Known: s != nil, Home: -1, Policy: p.cfg.Policy, PrefixOn: sv.ResidentOn, Adopted: sv.adopted}
	switch {
	case d.Reason == ReasonWait:
		if !req.Held {
			p.held++
		}
		return pl
	case req.Held:
		p.held--
	}
	i := indexOf(snap, d.Rank)
	if i < 0 {
		return pl
	}
	r := p.reps[i]
	pl.Replica = r
	r.Sent()
	p.bal[i].sent++
	p.scanStart = (p.scanStart + 1) % max(len(p.reps), 1) // vLLM's rotation, after every routed request
	switch {
	case req.Key == "":
	case s == nil:
		s = p.sessions.Insert(req.Key, d.Rank, now)
		if req.Subagent {
			p.sessions.MarkSubagent(s)
		}
	case s.Home() < 0 || d.Reason == ReasonFailover || d.Reason == ReasonMove || (sv.adopted && d.Reason == ReasonSticky):
		p.sessions.Rehome(s, d.Rank)
	}
	if s != nil {
		pl.Home = s.Home()
	}
	pl.key = req.Key
	pl.ticket = p.mem.Begin(req.Key, req.BodyBytes, d.Rank, d.Reason, now)
	pl.PrevContext, pl.PrevTurns = pl.ticket.prevTokens, pl.ticket.prevTurns
	return pl
}

// End records the end of a placed request (or of an attempt that never
// reached its engine): turn says it was served (it counts in the sticky
// share), u is what the engine reported (zero when nothing), ttft the
// seconds to its first answer content (< 0 none). It wakes the held requests. The
// caller takes the request off the replica's in-flight count afterwards.
func (p *Placer[R]) End(pl *Placement[R], turn bool, u Report, ttft float64) {
	if pl.ticket == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if turn && pl.Known {
		p.knownTurns++
		if pl.Reason == ReasonSticky {
			p.homeTurns++
		}
	}
	if pl.key != "" && u.Known {
		if s := p.sessions.Peek(pl.key); s != nil {
			p.sessions.AddUsage(s, u.Prompt, min(u.Cached, u.Prompt), u.Completion)
		}
	}
	p.mem.End(pl.ticket, u, ttft, p.clock())
	if p.held > 0 {
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// SetReplicas makes list (in rank order) the replicas placement considers.
// A replica no longer in it is forgotten by Memory (its requests still
// running end without bringing it back); the balancer view of the ones
// kept stays.
func (p *Placer[R]) SetReplicas(list []R) {
	p.mu.Lock()
	defer p.mu.Unlock()
	bal := make([]balancer, len(list))
	for i, r := range list {
		if j := slices.IndexFunc(p.reps, func(o R) bool { return o.Rank() == r.Rank() }); j >= 0 {
			bal[i] = p.bal[j]
		}
	}
	for _, o := range p.reps {
		if !slices.ContainsFunc(list, func(r R) bool { return r.Rank() == o.Rank() }) {
			p.mem.Forget(o.Rank())
		}
	}
	p.reps, p.bal = slices.Clone(list), bal
}

// refresh takes a new sample of every replica's load for the vLLM-style
// balancers from snap (the replicas' views, index for index): running up to
// max_num_seqs, the rest waiting, and forgets the requests sent since the
// last one. The caller holds p.mu.
func (p *Placer[R]) refresh(snap []ReplicaView, now time.Time) {
	for i, v := range snap {
		running := v.InFlight
		if v.MaxNumSeqs > 0 && running > v.MaxNumSeqs {
			running = v.MaxNumSeqs
		}
		p.bal[i] = balancer{running: running, waiting: v.InFlight - running}
	}
	p.lastRefresh = now
}

// RefreshBalancers takes the balancer sample now.
func (p *Placer[R]) RefreshBalancers() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refreshNow(p.clock())
}

// refreshNow takes the balancer sample at now. The caller holds p.mu.
func (p *Placer[R]) refreshNow(now time.Time) {
	snap := p.snap[:0]
	for _, r := range p.reps {
		snap = append(snap, r.View(now))
	}
	p.snap = snap
	p.refresh(snap, now)
}

// Tick is the Placer's housekeeping, one critical section: the balancer
// sample (RefreshBalancers) and the expiry of idle sessions, which reads
// (Counts) leave to it.
func (p *Placer[R]) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	p.refreshNow(now)
	p.sessions.Expire(now)
}

// TickBalancers runs Tick every period until ctx ends. The balancer view is
// refreshed as vLLM's coordinator publishes engine stats, on a fixed
// period: a decision sees the load as of the last tick plus what was sent
// since, never the exact load of its own instant (which would make `off`
// accidentally sticky: a closed-loop session's own replica is the one that
// just went idle). While it runs, decisions do not refresh on demand.
func (p *Placer[R]) TickBalancers(ctx context.Context, period time.Duration) {
	p.mu.Lock()
	p.ticking = true
	p.mu.Unlock()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.ticking = false
			p.mu.Unlock()
			return
		case <-t.C:
			p.Tick()
		}
	}
}

// Config is the policy in force and its knobs.
func (p *Placer[R]) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// SetPolicy switches the policy (a valid name; ValidPolicy) and returns the
// previous one; the session table and Memory are kept.
func (p *Placer[R]) SetPolicy(name string) (previous string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	previous, p.cfg.Policy = p.cfg.Policy, name
	return previous
}

// Wiped forgets what placement believed the replica's prefix cache held
// (a restart, a counter reset, /reset_prefix_cache): its conversations lose
// their home there and are placed by load on their next turn, and Memory's
// estimates for it start afresh. It returns how many lost their home.
func (p *Placer[R]) Wiped(rank int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.sessions.Unhome(rank)
	p.mem.Wiped(rank)
	return n
}

// Sessions runs f with the session table under the Placer's lock (saving
// and restoring it, counting homes). f must not call the Placer.
func (p *Placer[R]) Sessions(f func(*Table)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.sessions)
}

// Counts is a consistent reading of the Placer for the status.
type Counts struct {
	Policy            string
	Sessions          int    // in the table
	Seen              uint64 // distinct sessions since start
	Concurrent        int    // active sessions
	ActiveWindow      time.Duration
	ContextSum        uint64 // context tokens of the active sessions that have one
	ContextN          int
	SubagentSessions  int // active subagent sessions
	SubagentsSeen     uint64
	KnownTurns        uint64 // turns of sessions that had a home
	HomeTurns         uint64 // ... served there
	Held              int    // requests held for room now
	Ticking           bool   // TickBalancers runs
	LastRefresh       time.Time
	Active, Subagents []int // per rank asked for: active sessions and active subagent sessions homed there
}

// Counts reads the counts as of now, per rank for the ranks given. It is a
// read: idle sessions leave the table on the tick (Tick) and on decisions,
// and Counts leaves them out without removing them (Table.ReadAt).
func (p *Placer[R]) Counts(now time.Time, ranks []int) Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.sessions
	r := t.ReadAt(now)
	c := Counts{Policy: p.cfg.Policy, Sessions: r.Len, Seen: t.Seen(), Concurrent: r.ActiveTotal,
		ActiveWindow: t.ActiveWindow(), SubagentSessions: r.SubagentsActiveTotal, SubagentsSeen: t.SubagentsSeen(),
		ContextSum: r.ContextSum, ContextN: r.ContextN,
		KnownTurns: p.knownTurns, HomeTurns: p.homeTurns, Held: p.held, Ticking: p.ticking, LastRefresh: p.lastRefresh,
		Active: make([]int, len(ranks)), Subagents: make([]int, len(ranks))}
	for i, rank := range ranks {
		c.Active[i], c.Subagents[i] = r.Active(rank), r.SubagentsActive(rank)
	}
	return c
}

// ResidentOn is where Memory believes key's prefix is (-1 nowhere), on a
// snapshot taken as a decision takes it.
func (p *Placer[R]) ResidentOn(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	var snap []ReplicaView
	for _, r := range p.reps {
		v := r.View(now)
		v.ActiveSessions = p.sessions.Active(v.Rank)
		snap = append(snap, v)
	}
	sv := SessionView{Key: key}
	p.mem.ViewSession(&sv, 0, snap)
	return sv.ResidentOn
}
