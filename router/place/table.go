package place

import (
	"github.com/lmwarden/warden/internal/ilist"
	"iter"
	"slices"
	"time"
)

// Session is one conversation in the Table: its key, its home replica and
// what its finished requests reported. Read it through its methods; the
// Table changes it (it keeps per-replica counts in step).
type Session struct {
	key      string
	home     int   // rank
	lastSeen int64 // unix nanoseconds on the Placer's clock
	context  uint32
	active   bool                // seen within the table's active window
	subagent bool                // a subagent's conversation (MarkSubagent)
	lru      ilist.Link[Session] // on Table.lru

	// Usage reports of the conversation's finished requests.
	prompt, cached, completion uint64
}

// Key is the conversation's session key.
func (s *Session) Key() string { return s.key }

// Home is the rank of its home replica, -1 when it has none (Unhome).
func (s *Session) Home() int { return s.home }

// LastSeen is when the table last saw it (the Placer's clock).
func (s *Session) LastSeen() time.Time { return time.Unix(0, s.lastSeen) }

// Subagent says it is a subagent's conversation (MarkSubagent).
func (s *Session) Subagent() bool { return s.subagent }

// Context is its latest context length in tokens (0 unknown).
func (s *Session) Context() uint32 { return s.context }

// Usage is what its finished requests reported, summed.
func (s *Session) Usage() (prompt, cached, completion uint64) {
	return s.prompt, s.cached, s.completion
}

// Table maps conversation keys to their home replica, expires idle sessions
// after ttl and evicts the least recently used beyond max. Entries form an
// intrusive doubly linked list in order of last use (head = most recent),
// so that expiry and eviction pop from the tail without allocating. It is
// not safe for concurrent use: its Placer guards it.
//
// A session is active while it plausibly comes back soon: seen within the
// active window, derived from the gaps observed between a session's
// requests (twice their 90th percentile, within [MinActiveWindow, ttl]).
// Active sessions are a prefix of the list; oldestActive marks its end, so
// keeping the counts costs O(1) amortised per request.
type Table struct {
	ttl    time.Duration
	max    int
	m      map[string]*Session
	lru    ilist.List[Session] // most recently used first
	homed  map[int]int         // rank -> sessions whose home it is
	seen   uint64              // distinct sessions inserted since start
	ctxSum uint64              // sum of context over active sessions with a known context
	ctxN   int

	window       time.Duration
	scale        float64 // the engines' seconds per wall second (SetTimeScale); 0 = 1
	fixed        bool    // FixWindow: the window does not follow the gaps
	oldestActive *Session
	active       map[int]int // rank -> active sessions homed there
	nActive      int
	subActive    map[int]int // rank -> active subagent sessions homed there
	nSubActive   int
	subSeen      uint64
	gaps         [gapSamples]float64 // recent gaps between a session's requests, seconds (a ring)
	sorted       []float64           // observeGap's scratch
	nGaps        int
}

// Bounds and defaults of the active window.
const (
	MinActiveWindow     = 30 * time.Second
	DefaultActiveWindow = 5 * time.Minute // until enough gaps were seen
	gapSamples          = 256
	gapsBeforeWindow    = 16 // gaps seen before the window follows them
	gapsPerRecompute    = 32
)

// NewTable is a table whose entries expire after ttl idle (<= 0: never)
// and which holds at most max (<= 0: no bound).
func NewTable(ttl time.Duration, max int) *Table {
	t := &Table{ttl: ttl, max: max, m: make(map[string]*Session), homed: make(map[int]int), active: make(map[int]int), subActive: make(map[int]int),
		lru: ilist.New(func(s *Session) *ilist.Link[Session] { return &s.lru })}
	t.window = t.clampWindow(DefaultActiveWindow)
	return t
}

func (t *Table) clampWindow(w time.Duration) time.Duration {
	w = max(w, t.engineTime(MinActiveWindow))
	if t.ttl > 0 {
		w = min(w, t.ttl)
	}
	return w
}

// engineTime is d of the engines' time in wall time: a simulator that runs
// ten times faster than real time has agents come back ten times sooner.
func (t *Table) engineTime(d time.Duration) time.Duration {
	if t.scale <= 0 {
		return d
	}
	return time.Duration(float64(d) / t.scale)
}

// SetTimeScale tells the table the engines' simulated seconds per wall
// second (a simulator's --sim-time-scale; 1 for real engines): the active
// window's floor and its default before gaps were seen are engine time. The
// window follows at once.
func (t *Table) SetTimeScale(scale float64) {
	if scale == t.scale || t.fixed {
		return
	}
	t.scale = scale
	if t.nGaps < gapsBeforeWindow {
		t.window = t.clampWindow(t.engineTime(DefaultActiveWindow))
	} else {
		t.window = t.clampWindow(t.window)
	}
}

// ActiveWindow is how long after its last request a session counts as active.
func (t *Table) ActiveWindow() time.Duration { return t.window }

// FixWindow makes the active window w for good, whatever the gaps (the
// replay's: there every conversation placed counts as active). Call it
// before the first request.
func (t *Table) FixWindow(w time.Duration) { t.window, t.fixed = w, true }

// observeGap records the time between two requests of one session and,
// every gapsPerRecompute gaps, sets the window to twice their p90.
func (t *Table) observeGap(d time.Duration) {
	if t.fixed {
		return
	}
	t.gaps[t.nGaps%gapSamples] = d.Seconds()
	t.nGaps++
	if t.nGaps < gapsBeforeWindow || t.nGaps%gapsPerRecompute != 0 && t.nGaps != gapsBeforeWindow {
		return
	}
	g := append(t.sorted[:0], t.gaps[:min(t.nGaps, gapSamples)]...) // reused: no allocation per recompute
	t.sorted = g
	slices.Sort(g)
	p90 := g[len(g)*9/10]
	t.window = t.clampWindow(time.Duration(2 * p90 * float64(time.Second)))
}

func (t *Table) activate(s *Session) {
	s.active = true
	t.nActive++
	if s.home >= 0 {
		t.active[s.home]++
	}
	t.countSub(s, 1)
	if s.context > 0 {
		t.ctxSum += uint64(s.context)
		t.ctxN++
	}
}

func (t *Table) deactivate(s *Session) {
	s.active = false
	t.nActive--
	if s.home >= 0 {
		t.active[s.home]--
	}
	t.countSub(s, -1)
	if s.context > 0 {
		t.ctxSum -= uint64(s.context)
		t.ctxN--
	}
}

// countSub adds d to the active subagent counts when s is one.
func (t *Table) countSub(s *Session, d int) {
	if !s.subagent {
		return
	}
	t.nSubActive += d
	if s.home >= 0 {
		t.subActive[s.home] += d
	}
}

// MarkSubagent records that s is a subagent's conversation, for the counts
// the status shows; it changes nothing in placement.
func (t *Table) MarkSubagent(s *Session) {
	if s.subagent {
		return
	}
	s.subagent = true
	t.subSeen++
	if s.active {
		t.countSub(s, 1)
	}
}

// settle moves the active boundary to now - window, both ways (the window
// may have grown).
func (t *Table) settle(now time.Time) {
	cutoff := now.Add(-t.window).UnixNano()
	for b := t.oldestActive; b != nil && b.lastSeen < cutoff; b = t.oldestActive {
		t.deactivate(b)
		t.oldestActive = t.lru.Prev(b)
	}
	next := t.lru.Front()
	if t.oldestActive != nil {
		next = t.lru.Next(t.oldestActive)
	}
	for ; next != nil && next.lastSeen >= cutoff; next = t.lru.Next(next) {
		t.activate(next)
		t.oldestActive = next
	}
}

// touch makes s the most recently used at now, active.
func (t *Table) touch(s *Session, now time.Time) {
	if s == t.oldestActive && t.lru.Prev(s) != nil {
		t.oldestActive = t.lru.Prev(s)
	}
	s.lastSeen = now.UnixNano()
	t.lru.MoveToFront(s)
	if !s.active {
		t.activate(s)
	}
	if t.oldestActive == nil {
		t.oldestActive = s
	}
}

// Get returns the live entry for key (touching it) or nil, after expiring
// idle entries.
func (t *Table) Get(key string, now time.Time) *Session {
	t.Expire(now)
	s := t.m[key]
	if s != nil {
		if last := time.Unix(0, s.lastSeen); now.After(last) {
			t.observeGap(now.Sub(last))
		}
		t.touch(s, now)
	}
	return s
}

// Peek returns the entry for key without touching it.
func (t *Table) Peek(key string) *Session { return t.m[key] }

// Insert adds a new session with the given home and returns it, evicting
// the least recently used entry when the table is full.
func (t *Table) Insert(key string, home int, now time.Time) *Session {
	if t.max > 0 && len(t.m) >= t.max && t.lru.Back() != nil {
		t.remove(t.lru.Back())
	}
	s := &Session{key: key, home: home, lastSeen: now.UnixNano()}
	t.m[key] = s
	t.homed[home]++
	t.seen++
	t.lru.PushFront(s)
	t.activate(s)
	if t.oldestActive == nil {
		t.oldestActive = s
	}
	return s
}

// Restore inserts a saved session as the most recently used entry, with its
// saved last use, context and usage. It does not count as seen.
func (t *Table) Restore(key string, home int, lastSeen time.Time, context uint32, prompt, cached, completion uint64) {
	s := t.Insert(key, home, lastSeen)
	t.seen--
	s.prompt, s.cached, s.completion = prompt, cached, completion
	if context > 0 {
		t.SetContext(s, context)
	}
}

// Rehome moves a session to a new home replica.
func (t *Table) Rehome(s *Session, home int) {
	if s.active {
		t.deactivate(s)
		defer t.activate(s)
	}
	if s.home >= 0 {
		t.homed[s.home]--
	}
	s.home = home
	if home >= 0 {
		t.homed[home]++
	}
}

// Unhome takes their home from the sessions homed at rank (its cache was
// emptied): their Home is -1 until Rehome gives them one. It returns how
// many there were. It walks the whole table: a rare event.
func (t *Table) Unhome(rank int) int {
	n := 0
	for _, s := range t.m {
		if s.home == rank {
			t.Rehome(s, -1)
			n++
		}
	}
	return n
}

// AddUsage adds a finished request's report to the session and records its
// context (prompt + completion) as the latest.
func (t *Table) AddUsage(s *Session, prompt, cached, completion uint64) {
	s.prompt += prompt
	s.cached += cached
	s.completion += completion
	t.SetContext(s, uint32(min(prompt+completion, 1<<32-1)))
}

// SetContext records a session's latest context length in tokens.
func (t *Table) SetContext(s *Session, tokens uint32) {
	if s.active {
		if s.context == 0 {
			t.ctxN++
		}
		t.ctxSum += uint64(tokens) - uint64(s.context)
		if tokens == 0 {
			t.ctxN--
		}
	}
	s.context = tokens
}

// Expire removes sessions idle for longer than ttl (ttl <= 0: never).
// It also moves the active boundary to now.
func (t *Table) Expire(now time.Time) {
	if t.ttl > 0 {
		cutoff := now.Add(-t.ttl).UnixNano()
		for t.lru.Back() != nil && t.lru.Back().lastSeen < cutoff {
			t.remove(t.lru.Back())
		}
	}
	t.settle(now)
}

// Reading is the table's counts as of a moment (ReadAt): what they will be
// once Expire runs at that moment. Its per-rank methods read the table and
// are valid only until the table next changes.
type Reading struct {
	Len                  int // sessions
	ActiveTotal          int // active sessions, homed or not
	SubagentsActiveTotal int
	ContextSum           uint64 // context tokens of the active sessions that have one
	ContextN             int

	t                 *Table
	active, subActive map[int]int // per rank: the change from the table's counts (nil: none)
}

// Active is the number of active sessions whose home is rank.
func (r *Reading) Active(rank int) int { return r.t.active[rank] + r.active[rank] }

// SubagentsActive is the number of active subagent sessions whose home is rank.
func (r *Reading) SubagentsActive(rank int) int { return r.t.subActive[rank] + r.subActive[rank] }

// count adds d (1 or -1) to the counts s contributes to as an active session.
func (r *Reading) count(s *Session, d int) {
	add := func(m *map[int]int) {
		if s.home >= 0 {
			if *m == nil {
				*m = make(map[int]int)
			}
			(*m)[s.home] += d
		}
	}
	r.ActiveTotal += d
	add(&r.active)
	if s.subagent {
		r.SubagentsActiveTotal += d
		add(&r.subActive)
	}
	if s.context > 0 {
		r.ContextSum += uint64(int64(d) * int64(s.context)) // wraps back on -1
		r.ContextN += d
	}
}

// ReadAt reads the counts as of now without changing the table: the
// sessions Expire(now) would remove are left out and the active boundary is
// read at now - window, walking the same entries Expire would. A status
// reads through it; the Placer's tick and its decisions expire.
func (t *Table) ReadAt(now time.Time) Reading {
	r := Reading{Len: len(t.m), ActiveTotal: t.nActive, SubagentsActiveTotal: t.nSubActive,
		ContextSum: t.ctxSum, ContextN: t.ctxN, t: t}
	oldest := t.oldestActive
	expired := func(*Session) bool { return false }
	if t.ttl > 0 {
		ttlCut := now.Add(-t.ttl).UnixNano()
		expired = func(s *Session) bool { return s.lastSeen < ttlCut }
		for s := t.lru.Back(); s != nil && expired(s); s = t.lru.Prev(s) { // the removed: a suffix
			r.Len--
			if s.active {
				r.count(s, -1)
			}
			if s == oldest {
				oldest = t.lru.Prev(s)
			}
		}
	}
	cutoff := now.Add(-t.window).UnixNano()
	for b := oldest; b != nil && b.lastSeen < cutoff; b = oldest {
		r.count(b, -1)
		oldest = t.lru.Prev(b)
	}
	next := t.lru.Front()
	if oldest != nil {
		next = t.lru.Next(oldest)
	}
	for ; next != nil && next.lastSeen >= cutoff && !expired(next); next = t.lru.Next(next) {
		r.count(next, 1)
	}
	return r
}

func (t *Table) remove(s *Session) {
	if s.active {
		t.deactivate(s)
	}
	if s == t.oldestActive {
		t.oldestActive = t.lru.Prev(s)
	}
	delete(t.m, s.key)
	if s.home >= 0 {
		t.homed[s.home]--
	}
	t.lru.Remove(s)
}

// Len is the number of sessions.
func (t *Table) Len() int { return len(t.m) }

// Active is the number of active sessions (seen within the active window
// as of the last Get or Expire) whose home is rank.
func (t *Table) Active(rank int) int { return t.active[rank] }

// ActiveTotal is the number of active sessions, homed or not.
func (t *Table) ActiveTotal() int { return t.nActive }

// SubagentsActive is the number of active subagent sessions whose home is
// rank; SubagentsActiveTotal counts them over all ranks (and homeless ones),
// SubagentsSeen the distinct ones marked since start.
func (t *Table) SubagentsActive(rank int) int { return t.subActive[rank] }
func (t *Table) SubagentsActiveTotal() int    { return t.nSubActive }
func (t *Table) SubagentsSeen() uint64        { return t.subSeen }

// Homed is the number of sessions in the table whose home is rank.
func (t *Table) Homed(rank int) int { return t.homed[rank] }

// Seen is the number of distinct sessions inserted since start.
func (t *Table) Seen() uint64 { return t.seen }

// Contexts are the summed context lengths of the active sessions that have
// one, and how many those are.
func (t *Table) Contexts() (sum uint64, n int) { return t.ctxSum, t.ctxN }

// Oldest yields the sessions from the least to the most recently used.
func (t *Table) Oldest() iter.Seq[*Session] {
	return func(yield func(*Session) bool) {
		for s := t.lru.Back(); s != nil; s = t.lru.Prev(s) {
			if !yield(s) {
				return
			}
		}
	}
}
