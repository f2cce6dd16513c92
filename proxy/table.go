package proxy

import "time"

// session is one conversation in the table. Entries form an intrusive
// doubly linked list in order of last use (head = most recent) so that
// expiry and LRU eviction pop from the tail without extra allocations.
type session struct {
	key      string
	home     int   // rank
	lastSeen int64 // unix nanoseconds on the injected clock
	context  uint32
	lru      link[session] // on sessionTable.lru

	// Usage reports of the conversation's finished requests.
	prompt, cached, completion uint64
}

// sessionTable maps conversation keys to their home replica, expires idle
// sessions after ttl and evicts the least recently used beyond max. It is
// not safe for concurrent use: the proxy guards it with its own mutex.
type sessionTable struct {
	ttl    time.Duration
	max    int
	m      map[string]*session
	lru    ilist[session] // most recently used first
	active map[int]int    // rank -> sessions whose home it is
	seen   uint64         // distinct sessions inserted since start
	ctxSum uint64         // sum of context over sessions with a known context
	ctxN   int
}

func newSessionTable(ttl time.Duration, max int) *sessionTable {
	return &sessionTable{ttl: ttl, max: max, m: make(map[string]*session), active: make(map[int]int),
		lru: ilist[session]{at: func(s *session) *link[session] { return &s.lru }}}
}

// get returns the live entry for key (touching it) or nil, after expiring
// idle entries.
func (t *sessionTable) get(key string, now time.Time) *session {
	t.expire(now)
	s := t.m[key]
	if s != nil {
		s.lastSeen = now.UnixNano()
		t.lru.moveFront(s)
	}
	return s
}

// peek returns the entry for key without touching it.
func (t *sessionTable) peek(key string) *session { return t.m[key] }

// insert adds a new session with the given home and returns it, evicting
// the least recently used entry when the table is full.
func (t *sessionTable) insert(key string, home int, now time.Time) *session {
	if t.max > 0 && len(t.m) >= t.max && t.lru.tail != nil {
		t.remove(t.lru.tail)
	}
	s := &session{key: key, home: home, lastSeen: now.UnixNano()}
	t.m[key] = s
	t.active[home]++
	t.seen++
	t.lru.pushFront(s)
	return s
}

// rehome moves a session to a new home replica.
func (t *sessionTable) rehome(s *session, home int) {
	t.active[s.home]--
	s.home = home
	t.active[home]++
}

// setContext records a session's latest context length in tokens.
func (t *sessionTable) setContext(s *session, tokens uint32) {
	if s.context == 0 {
		t.ctxN++
	}
	t.ctxSum += uint64(tokens) - uint64(s.context)
	s.context = tokens
	if tokens == 0 {
		t.ctxN--
	}
}

// expire removes sessions idle for longer than ttl (ttl <= 0: never).
func (t *sessionTable) expire(now time.Time) {
	if t.ttl <= 0 {
		return
	}
	cutoff := now.Add(-t.ttl).UnixNano()
	for t.lru.tail != nil && t.lru.tail.lastSeen < cutoff {
		t.remove(t.lru.tail)
	}
}

func (t *sessionTable) remove(s *session) {
	delete(t.m, s.key)
	t.active[s.home]--
	if s.context > 0 {
		t.ctxSum -= uint64(s.context)
		t.ctxN--
	}
	t.lru.unlink(s)
}

func (t *sessionTable) len() int { return len(t.m) }
