package place

import (
	"iter"
	"time"
)

// Session is one conversation in the Table: its key, its home replica and
// what its finished requests reported. Read it through its methods; the
// Table changes it (it keeps per-replica counts in step).
type Session struct {
	key      string
	home     int   // rank
	lastSeen int64 // unix nanoseconds on the proxy's clock
	context  uint32
	lru      link[Session] // on Table.lru

	// Usage reports of the conversation's finished requests.
	prompt, cached, completion uint64
}

// Key is the conversation's session key.
func (s *Session) Key() string { return s.key }

// Home is the rank of its home replica, -1 when it has none (Unhome).
func (s *Session) Home() int { return s.home }

// LastSeen is when the table last saw it (the proxy's clock).
func (s *Session) LastSeen() time.Time { return time.Unix(0, s.lastSeen) }

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
// not safe for concurrent use: the proxy guards it with its own mutex.
type Table struct {
	ttl    time.Duration
	max    int
	m      map[string]*Session
	lru    ilist[Session] // most recently used first
	active map[int]int    // rank -> sessions whose home it is
	seen   uint64         // distinct sessions inserted since start
	ctxSum uint64         // sum of context over sessions with a known context
	ctxN   int
}

// NewTable is a table whose entries expire after ttl idle (<= 0: never)
// and which holds at most max (<= 0: no bound).
func NewTable(ttl time.Duration, max int) *Table {
	return &Table{ttl: ttl, max: max, m: make(map[string]*Session), active: make(map[int]int),
		lru: ilist[Session]{at: func(s *Session) *link[Session] { return &s.lru }}}
}

// Get returns the live entry for key (touching it) or nil, after expiring
// idle entries.
func (t *Table) Get(key string, now time.Time) *Session {
	t.Expire(now)
	s := t.m[key]
	if s != nil {
		s.lastSeen = now.UnixNano()
		t.lru.moveFront(s)
	}
	return s
}

// Peek returns the entry for key without touching it.
func (t *Table) Peek(key string) *Session { return t.m[key] }

// Insert adds a new session with the given home and returns it, evicting
// the least recently used entry when the table is full.
func (t *Table) Insert(key string, home int, now time.Time) *Session {
	if t.max > 0 && len(t.m) >= t.max && t.lru.tail != nil {
		t.remove(t.lru.tail)
	}
	s := &Session{key: key, home: home, lastSeen: now.UnixNano()}
	t.m[key] = s
	t.active[home]++
	t.seen++
	t.lru.pushFront(s)
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
	if s.home >= 0 {
		t.active[s.home]--
	}
	s.home = home
	if home >= 0 {
		t.active[home]++
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
	if s.context == 0 {
		t.ctxN++
	}
	t.ctxSum += uint64(tokens) - uint64(s.context)
	s.context = tokens
	if tokens == 0 {
		t.ctxN--
	}
}

// Expire removes sessions idle for longer than ttl (ttl <= 0: never).
func (t *Table) Expire(now time.Time) {
	if t.ttl <= 0 {
		return
	}
	cutoff := now.Add(-t.ttl).UnixNano()
	for t.lru.tail != nil && t.lru.tail.lastSeen < cutoff {
		t.remove(t.lru.tail)
	}
}

func (t *Table) remove(s *Session) {
	delete(t.m, s.key)
	if s.home >= 0 {
		t.active[s.home]--
	}
	if s.context > 0 {
		t.ctxSum -= uint64(s.context)
		t.ctxN--
	}
	t.lru.unlink(s)
}

// Len is the number of sessions.
func (t *Table) Len() int { return len(t.m) }

// Active is the number of sessions whose home is rank.
func (t *Table) Active(rank int) int { return t.active[rank] }

// Seen is the number of distinct sessions inserted since start.
func (t *Table) Seen() uint64 { return t.seen }

// Contexts are the summed context lengths of the sessions that have one,
// and how many those are.
func (t *Table) Contexts() (sum uint64, n int) { return t.ctxSum, t.ctxN }

// Oldest yields the sessions from the least to the most recently used.
func (t *Table) Oldest() iter.Seq[*Session] {
	return func(yield func(*Session) bool) {
		for s := t.lru.tail; s != nil; s = t.lru.prev(s) {
			if !yield(s) {
				return
			}
		}
	}
}
