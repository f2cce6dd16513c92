package place

import "github.com/lmwarden/warden/internal/ilist"

import "time"

// Memory is what the adaptive policy remembers between decisions: per
// replica, an LRU estimate of which conversations' prefixes its KV cache
// still holds (from the prompt and completion sizes the engines reported),
// the tokens its active conversations need, and measured turn times; per
// conversation, its context size, where its prefix lives and when it last
// moved. It is fed by its Placer (Begin, End) and read into the placement
// snapshot (FillView, ViewSession), so that the policy itself stays a pure
// function. Not safe for concurrent use: its Placer guards it. Times come from the caller's clock (the injected one).
type Memory struct {
	reps  map[int]*memRep
	sess  map[string]*memSess
	max   int                 // conversations remembered (LRU over all beyond)
	all   ilist.List[memSess] // every remembered conversation, most recently used first
	tpb   ewma                // prompt tokens per body byte (usage / request size)
	homed map[int]int         // rank -> conversations placed there (new, moved or failed over) since the policy last changed
	epoch string              // the policy those placements were made under
	Grace float64             // a finished conversation stays active this many turn times (default 0.05)
}

// memRep is one replica's part of Memory.
type memRep struct {
	lru      ilist.List[memSess] // conversations whose prefix this replica served last, most recent first
	inflight int                 // our requests here
	flyTok   int                 // KV footprint of the conversations in flight here
	turn     ewma                // seconds from placement to the end of a request
	wait     ewma                // seconds from placement to the first byte
	shared   ewma                // tokens a first turn found cached (the shared system prompt)
	prefill  ewma                // seconds per computed prompt token, from quiet first bytes
}

// memSess is one conversation in Memory.
type memSess struct {
	key      string
	rank     int // replica that served it last (holds its prefix), -1 none
	tokens   int // context after its last turn: prompt + completion (or an estimate)
	shared   int // of which the first turn found cached (shared with others)
	inflight int
	lastEnd  time.Time
	turns    int
	movedAt  int // turns when it last moved; -1 never
	flyFoot  int // footprint added to its replica's flyTok while in flight

	onRep ilist.Link[memSess] // on its replica's memRep.lru
	onAll ilist.Link[memSess] // on Memory.all (the bound)
}

// Report is what the engine said of a finished request (a data plane's
// tap.Usage converts to it): the whole prompt, its cached part and the completion, in
// tokens; Known is false when it said nothing.
type Report struct {
	Known      bool
	Prompt     uint64
	Cached     uint64
	Completion uint64
}

// ewma is an exponentially weighted mean; zero until the first sample.
type ewma struct {
	v float64
	n int
}

func (e *ewma) add(x, alpha float64) {
	if e.n == 0 {
		e.v = x
	} else {
		e.v += alpha * (x - e.v)
	}
	e.n++
}

// Defaults of the adaptive policy's state.
const (
	defaultGrace       = 0.05 // turn times a finished conversation keeps its room (a client's round trip)
	defaultTokPerByte  = 0.22 // before the first usage report (JSON + ~4 chars per token)
	minBodyForEstimate = 64
)

// DefaultMaxSessions bounds the session table and Memory when the
// configuration gives no bound (router.Config.MaxSessions).
const DefaultMaxSessions = 100_000

// NewMemory remembers at most max conversations (<= 0: DefaultMaxSessions).
func NewMemory(max int) *Memory {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	return &Memory{reps: map[int]*memRep{}, sess: map[string]*memSess{}, max: max, homed: map[int]int{},
		Grace: defaultGrace, all: ilist.New(func(s *memSess) *ilist.Link[memSess] { return &s.onAll })}
}

func (m *Memory) rep(rank int) *memRep {
	r := m.reps[rank]
	if r == nil {
		r = &memRep{lru: ilist.New(func(s *memSess) *ilist.Link[memSess] { return &s.onRep })}
		m.reps[rank] = r
	}
	return r
}

// tokensFor estimates a request's prompt tokens from its body size.
func (m *Memory) tokensFor(bodyBytes int) int {
	tpb := defaultTokPerByte
	if m.tpb.n > 0 {
		tpb = m.tpb.v
	}
	return int(float64(bodyBytes) * tpb)
}

// footprint is the KV a conversation of tokens keeps on a replica beyond
// the shared prefix.
func (r *memRep) footprint(s *memSess, tokens int) int {
	shared := s.shared
	if s.turns == 0 || shared == 0 {
		shared = int(r.shared.v)
	}
	return max(tokens-shared, tokens/8)
}

// Ticket is one placed request, from begin to end.
type Ticket struct {
	s      *memSess // nil for a request without a session
	rank   int
	start  time.Time
	bytes  int
	foot   int
	quiet  bool // nothing else was in flight on the replica when it was placed
	closed bool

	prevTokens, prevTurns int // the conversation's context and turns before this request
}

// get returns the conversation's entry, creating it; nil for key "".
func (m *Memory) get(key string) *memSess {
	if key == "" {
		return nil
	}
	if s := m.sess[key]; s != nil {
		m.all.MoveToFront(s)
		return s
	}
	for len(m.sess) >= m.max && m.all.Back() != nil {
		m.drop(m.all.Back())
	}
	s := &memSess{key: key, rank: -1, movedAt: -1}
	m.sess[key] = s
	m.all.PushFront(s)
	return s
}

// drop forgets a conversation (bound reached).
func (m *Memory) drop(s *memSess) {
	m.all.Remove(s)
	if s.rank >= 0 {
		m.rep(s.rank).lru.Remove(s)
	}
	s.rank = -1
	delete(m.sess, s.key)
}

// policy notes the policy in force: a change starts the homed counts
// afresh, so that placements made under another policy (e.g. `off`'s
// lowest-rank ties) do not steer this one's.
func (m *Memory) SetPolicy(name string) {
	if name != m.epoch {
		m.epoch = name
		clear(m.homed)
	}
}

// forget removes a replica's state (the replica was removed): its prefix
// estimates, its conversations' residency and its share of bestShared.
// Requests still running there end without bringing it back.
func (m *Memory) Forget(rank int) {
	r := m.reps[rank]
	if r == nil {
		return
	}
	r.disown()
	delete(m.reps, rank)
}

// Wiped forgets what the replica's prefix cache was believed to hold (an
// engine restart, a counter reset, /reset_prefix_cache): no conversation's
// prefix is resident there any more, its shared-prefix estimate starts
// afresh and the conversations homed there count as homed nowhere. Its
// timing estimates (turn, wait, prefill) stay: the engine is as fast as
// before. Requests still running there end normally.
func (m *Memory) Wiped(rank int) {
	r := m.reps[rank]
	if r == nil {
		return
	}
	r.disown()
	r.shared = ewma{}
	delete(m.homed, rank)
}

// disown empties the replica's LRU: its conversations' prefixes are
// resident nowhere.
func (r *memRep) disown() {
	for s := r.lru.Front(); s != nil; s = r.lru.Next(s) {
		s.rank = -1
	}
	r.lru.Clear()
}

// begin records a request placed on rank with a body of bodyBytes. A
// conversation placed away from the replica that held its prefix now has it
// computed there (a move, a spill or a failover).
func (m *Memory) Begin(key string, bodyBytes, rank int, reason Reason, now time.Time) *Ticket {
	r := m.rep(rank)
	t := &Ticket{rank: rank, start: now, bytes: bodyBytes, quiet: r.inflight == 0}
	s := m.get(key)
	est := m.tokensFor(bodyBytes)
	if s == nil {
		t.foot = est
	} else {
		t.s, t.prevTokens, t.prevTurns = s, s.tokens, s.turns
		est = max(est, s.tokens)
		if s.inflight == 0 && s.rank < 0 {
			m.homed[rank]++ // its first placement, or the first since its prefix was lost
		} else if reason == ReasonMove || reason == ReasonFailover {
			m.homed[rank]++
			if s.rank >= 0 && m.homed[s.rank] > 0 {
				m.homed[s.rank]--
			}
		}
		if s.rank != rank {
			if s.rank >= 0 {
				m.rep(s.rank).lru.Remove(s)
			}
			s.rank = rank
		} else {
			r.lru.Remove(s)
		}
		r.lru.PushFront(s)
		s.inflight++
		if reason == ReasonMove {
			s.movedAt = s.turns
		}
		t.foot = r.footprint(s, est)
	}
	r.inflight++
	r.flyTok += t.foot
	return t
}

// end records a request's end: its usage (if the engine reported one) and
// its time to first answer content in seconds (< 0 if none). Idempotent.
func (m *Memory) End(t *Ticket, u Report, ttft float64, now time.Time) {
	if t == nil || t.closed {
		return
	}
	t.closed = true
	const alpha = 0.1
	if u.Known && u.Prompt > 0 && t.bytes >= minBodyForEstimate {
		m.tpb.add(float64(u.Prompt)/float64(t.bytes), alpha)
	}
	r := m.reps[t.rank] // nil: the replica was removed (forget) while this ran
	if r != nil {
		r.inflight--
		r.flyTok -= t.foot
		r.turn.add(now.Sub(t.start).Seconds(), alpha)
		if ttft >= 0 {
			r.wait.add(ttft, alpha)
		}
		computed := float64(u.Prompt - min(u.Cached, u.Prompt))
		if u.Known && u.Prompt > 0 && t.quiet && ttft >= 0 && computed >= 512 {
			r.prefill.add(ttft/computed, alpha)
		}
	}
	s := t.s
	if s == nil || m.sess[s.key] != s {
		return // no session, or forgotten meanwhile
	}
	s.inflight--
	s.lastEnd = now
	if u.Known && u.Prompt > 0 {
		if s.turns == 0 {
			s.shared = int(u.Cached)
			if r != nil {
				r.shared.add(float64(u.Cached), alpha)
			}
		}
		s.tokens = int(u.Prompt + u.Completion)
	}
	s.turns++
	if r != nil && s.rank == t.rank { // still its prefix's replica: most recently used now
		r.lru.Remove(s)
		r.lru.PushFront(s)
	}
}

// maxWalk bounds the LRU walks of fill and sessionView.
const maxWalk = 4096

// fill completes the snapshot's adaptive fields from the state.
func (m *Memory) FillView(snap []ReplicaView, now time.Time) {
	for i := range snap {
		r := m.reps[snap[i].Rank]
		if r == nil {
			continue
		}
		ws, active := int(r.shared.v)+r.flyTok, 0
		recent := m.Grace * r.turn.v
		n := 0
		for s := r.lru.Front(); s != nil && n < maxWalk; s = r.lru.Next(s) {
			n++
			if s.inflight > 0 {
				active++
				continue
			}
			if now.Sub(s.lastEnd).Seconds() > recent {
				break
			}
			active++
			ws += r.footprint(s, s.tokens)
		}
		snap[i].WorkingSet, snap[i].Active = ws, active
		snap[i].Homed = m.homed[snap[i].Rank]
		snap[i].TurnSeconds, snap[i].WaitSeconds, snap[i].PrefillSecPerToken = r.turn.v, r.wait.v, r.prefill.v
	}
}

// sessionView completes sv's adaptive fields: the request's estimated
// tokens, the conversation's KV footprint, the replica that probably still
// holds its prefix (by the LRU estimate against snap's KV capacities) and
// the turns since it last moved.
func (m *Memory) ViewSession(sv *SessionView, bodyBytes int, snap []ReplicaView) {
	sv.ResidentOn, sv.TurnsSinceMove = -1, 1<<30
	sv.Tokens = m.tokensFor(bodyBytes)
	s := m.sess[sv.Key]
	if s == nil {
		sv.Footprint = sv.Tokens
		if r := m.bestShared(); r > 0 {
			sv.Footprint = max(sv.Tokens-r, sv.Tokens/8)
		}
		return
	}
	sv.Tokens = max(sv.Tokens, s.tokens)
	if s.movedAt >= 0 {
		sv.TurnsSinceMove = s.turns - s.movedAt
	}
	sv.Footprint = sv.Tokens
	if s.rank < 0 {
		return
	}
	r := m.rep(s.rank)
	sv.Footprint = r.footprint(s, sv.Tokens)
	i := indexOf(snap, s.rank)
	if i < 0 || snap[i].KVCapacity <= 0 {
		return
	}
	if s.inflight > 0 {
		sv.ResidentOn = s.rank
		return
	}
	used := int(r.shared.v) + r.flyTok + r.footprint(s, s.tokens)
	n := 0
	for o := r.lru.Front(); o != nil && o != s && n < maxWalk; o = r.lru.Next(o) {
		n++
		if o.inflight == 0 {
			used += r.footprint(o, o.tokens)
		}
		if used > snap[i].ResidentCapacity() {
			return
		}
	}
	if used <= snap[i].ResidentCapacity() {
		sv.ResidentOn = s.rank
	}
}

// bestShared is the largest shared-prefix estimate over replicas (0 none).
func (m *Memory) bestShared() int {
	b := 0
	for _, r := range m.reps {
		b = max(b, int(r.shared.v))
	}
	return b
}
