package router

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/schema"
)

// Admission: a farm's fair share (issue 46). An agent farm is many agent
// trees (a root conversation and its subagents, identity.SessionKey.Root)
// on few engine slots. Without it the engines queue first come first
// served, and one tree's burst of parallel subagents makes every other
// conversation wait behind it.
//
// The admission queue sits in front of the Placer, for every data plane:
//
//   - What is admitted when. A request goes to the engines while some
//     replica can start it at once: its requests in flight (placed, or
//     admitted and not yet placed) are fewer than its running slots
//     (max_num_seqs). A tree that has its fair share in flight (the
//     slots over the active trees, at least minShare) also leaves each
//     replica's reserve free: one slot for every other tree that was
//     active there in the last rootActiveWindow and has nothing in flight
//     now (its next turn is coming), all but one of the replica's slots at
//     most. So a flood of subagents fills the farm only up to what the
//     idle conversations' next turns need, and a conversation's next turn
//     starts at once. The replicas a request may not use are added to its
//     Skip, so the Placer chooses among those that can start it.
//   - The order of the rest: the request's class (X-Warden-Priority:
//     interactive, then unmarked, then background), then the fewest
//     requests its tree has in flight (a tree's first request ahead of
//     another's hundredth parallel one), then the least attained service
//     (the tree's uncached prompt and completion tokens, halved every
//     serviceHalfLife), then arrival.
//   - The bound. A request waits at most MaxWait, and at most MaxQueue
//     wait (past it the last in the order is let go); one let go is told
//     to retry (ReasonBusy: 429 with Retry-After on OpenAI paths, 529
//     overloaded_error on Anthropic's), never dropped.

// Priority classes of a request (PriorityHeader), the first served first.
const (
	PriorityInteractive = 0
	PriorityDefault     = 1
	PriorityBackground  = 2
)

// PriorityHeader is the request header that sets a request's class:
// "interactive" or "background" (anything else: the default class).
const PriorityHeader = "X-Warden-Priority"

// ParsePriority is the class a PriorityHeader value names.
func ParsePriority(v string) int {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "interactive":
		return PriorityInteractive
	case "background", "batch":
		return PriorityBackground
	}
	return PriorityDefault
}

const (
	rootActiveWindow = 30 * time.Second // a tree keeps its reserve this long after its last request
	serviceHalfLife  = time.Minute      // attained service halves in this time
	admitRecheck     = time.Second      // a waiter asks again without a wake-up
	maxRoots         = 1 << 16          // trees remembered (the idle ones beyond are forgotten)
)

// admission is the queue in front of placement. Its lock is taken before
// none other and reads the replicas' atomics only.
type admission struct {
	maxWait  time.Duration
	maxQueue int
	clock    func() time.Time
	replicas func() []*Replica

	mu       sync.Mutex
	roots    map[string]*root
	queue    []*waiter
	pending  map[int]int // admitted, not yet placed, by the rank charged
	seq      uint64
	admitted uint64  // requests admitted
	queued   uint64  // ... of which waited in the queue
	busy     uint64  // told to retry
	meanHold float64 // seconds a request holds its slot (moving average)
	slots    int     // the replicas' running slots, at the last dispatch
	share    int     // a tree's fair share of them then (fairShare)
}

// root is one agent tree's share.
type root struct {
	inflight, queued int
	lastRank         int       // where its last request was placed (-1 none)
	lastEnd          time.Time // when its last request ended
	service          float64   // attained service (tokens), decayed to stamp
	stamp            time.Time
}

// waiter is one request in the queue.
type waiter struct {
	root  *root
	class int
	seq   uint64
	since time.Time
	skip  []int // the request's own skipped ranks (a retry)
	done  chan struct{}
	// Set under the lock when done is closed: granted with the ranks it may
	// not use and the rank charged, or let go (busy).
	granted bool
	deny    []int
	charged int
}

// admitTicket is an admitted request's share, carried on its Placement.
type admitTicket struct {
	root    *root
	charged int // the rank its pending admission was charged to
	start   time.Time
	placed  bool
}

func newAdmission(maxWait time.Duration, maxQueue int, clock func() time.Time, replicas func() []*Replica) *admission {
	return &admission{maxWait: maxWait, maxQueue: maxQueue, clock: clock, replicas: replicas,
		roots: map[string]*root{}, pending: map[int]int{}}
}

// admitResult is what admit says of a request.
type admitResult int

const (
	admitted admitResult = iota
	letGo                // past the bound: tell the client to retry
	gaveUp               // ctx ended while it waited
)

// admit waits until req may go to the engines (its Skip then names the
// replicas it may not use), the bound lets it go, or ctx ends.
func (a *admission) admit(ctx context.Context, req *place.Request) (*admitTicket, time.Duration, admitResult) {
	now := a.clock()
	a.mu.Lock()
	w := a.enqueue(req, now)
	a.dispatch(now)
	if a.waitingLocked(w) {
		a.queued++
	}
	a.mu.Unlock()
	t := time.NewTimer(min(admitRecheck, a.maxWait))
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return a.outcome(w, req)
		case <-ctx.Done():
			a.mu.Lock()
			if a.remove(w) {
				a.mu.Unlock()
				return nil, a.clock().Sub(w.since), gaveUp
			}
			a.mu.Unlock()
			tk, waited, res := a.outcome(w, req)
			if res == admitted {
				a.placed(tk, -1)
			}
			return nil, waited, gaveUp
		case <-t.C:
			now := a.clock()
			a.mu.Lock()
			if now.Sub(w.since) >= a.maxWait && a.remove(w) {
				a.busy++
				a.mu.Unlock()
				return nil, now.Sub(w.since), letGo
			}
			a.dispatch(now)
			a.mu.Unlock()
			t.Reset(min(admitRecheck, max(a.maxWait-now.Sub(w.since), time.Millisecond)))
		}
	}
}

// outcome reads a waiter whose done is closed.
func (a *admission) outcome(w *waiter, req *place.Request) (*admitTicket, time.Duration, admitResult) {
	a.mu.Lock()
	defer a.mu.Unlock()
	waited := a.clock().Sub(w.since)
	if !w.granted {
		return nil, waited, letGo
	}
	for _, r := range w.deny {
		if !slices.Contains(req.Skip, r) {
			req.Skip = append(req.Skip, r)
		}
	}
	return &admitTicket{root: w.root, charged: w.charged, start: a.clock()}, waited, admitted
}

// waitingLocked reports whether w is still in the queue. The caller holds
// a.mu.
func (a *admission) waitingLocked(w *waiter) bool { return slices.Contains(a.queue, w) }

// enqueue adds req's waiter. The caller holds a.mu.
func (a *admission) enqueue(req *place.Request, now time.Time) *waiter {
	key := req.Root
	r := a.roots[key]
	if r == nil {
		if len(a.roots) >= maxRoots {
			a.forgetIdle(now)
		}
		r = &root{lastRank: -1, stamp: now}
		a.roots[key] = r
	}
	r.queued++
	a.seq++
	w := &waiter{root: r, class: req.Priority, seq: a.seq, since: now,
		skip: slices.Clone(req.Skip), done: make(chan struct{}), charged: -1}
	a.queue = append(a.queue, w)
	return w
}

// remove takes w out of the queue unanswered; false when it was answered
// already. The caller holds a.mu.
func (a *admission) remove(w *waiter) bool {
	i := slices.Index(a.queue, w)
	if i < 0 {
		return false
	}
	a.queue = slices.Delete(a.queue, i, i+1)
	w.root.queued--
	close(w.done)
	return true
}

// forgetIdle drops the trees with nothing in flight or queued. The caller
// holds a.mu.
func (a *admission) forgetIdle(now time.Time) {
	for k, r := range a.roots {
		if r.inflight == 0 && r.queued == 0 && now.Sub(r.lastEnd) > rootActiveWindow {
			delete(a.roots, k)
		}
	}
}

// slot is one replica's room as dispatch sees it.
type slot struct {
	rank, cap, used, reserve int
}

// dispatch admits the waiters in the fair order while a replica can start
// them, and lets go of the last ones past MaxQueue. The caller holds a.mu.
func (a *admission) dispatch(now time.Time) {
	if len(a.queue) == 0 {
		return
	}
	slots := a.room(now)
	slices.SortFunc(a.queue, func(x, y *waiter) int { return a.before(x, y, now) })
	kept := a.queue[:0]
	for _, w := range a.queue {
		if best := a.pickSlot(slots, w); best >= 0 {
			a.grant(w, slots, best)
			continue
		}
		kept = append(kept, w)
	}
	clear(a.queue[len(kept):])
	a.queue = kept
	for len(a.queue) > a.maxQueue {
		w := a.queue[len(a.queue)-1]
		a.remove(w)
		a.busy++
	}
}

// room reads every replica in rotation: its slots, what is in flight or
// admitted there, and its reserve for idle trees. The caller holds a.mu.
func (a *admission) room(now time.Time) []slot {
	var slots []slot
	total := 0
	for _, r := range a.replicas() {
		if !r.Healthy() {
			continue
		}
		c := r.seqs()
		if c <= 0 {
			c = engine.VLLMMaxNumSeqs
		}
		slots = append(slots, slot{rank: r.Rank(), cap: c, used: r.InFlight() + a.pending[r.Rank()]})
		total += c
	}
	a.slots = total
	for _, t := range a.roots {
		if t.inflight > 0 || t.lastRank < 0 || (t.queued == 0 && now.Sub(t.lastEnd) > rootActiveWindow) {
			continue
		}
		for i := range slots {
			if slots[i].rank == t.lastRank {
				slots[i].reserve++
			}
		}
	}
	for i := range slots {
		slots[i].reserve = min(slots[i].reserve, slots[i].cap-1)
	}
	active := 0
	for _, t := range a.roots {
		if t.inflight > 0 || t.queued > 0 || now.Sub(t.lastEnd) <= rootActiveWindow {
			active++
		}
	}
	a.share = max(minShare, (total+active-1)/max(active, 1))
	return slots
}

// minShare is the least fair share of a tree: its requests in flight
// below it take any free slot, reserved or not.
const minShare = 2

// honours reports whether a request of tree r leaves the reserves free:
// the tree has its fair share in flight already.
func (a *admission) honours(r *root) bool { return r.inflight >= a.share }

// pickSlot is the index of the replica w's request is charged to (the
// one with the most room it may use), -1 when none can start it now.
func (a *admission) pickSlot(slots []slot, w *waiter) int {
	best, bestFree := -1, 0
	for i, s := range slots {
		if slices.Contains(w.skip, s.rank) {
			continue
		}
		free := s.cap - s.used
		if a.honours(w.root) {
			free -= s.reserve
		}
		if free > bestFree {
			best, bestFree = i, free
		}
	}
	return best
}

// grant admits w, charged to slots[i]; the replicas it may not use are
// the ones that cannot start it now. The caller holds a.mu.
func (a *admission) grant(w *waiter, slots []slot, i int) {
	for _, s := range slots {
		free := s.cap - s.used
		if a.honours(w.root) {
			free -= s.reserve
		}
		if free <= 0 {
			w.deny = append(w.deny, s.rank)
		}
	}
	slots[i].used++
	w.charged = slots[i].rank
	a.pending[w.charged]++
	w.granted = true
	w.root.queued--
	w.root.inflight++
	a.admitted++
	close(w.done)
}

// before orders two waiters: class, the tree's requests in flight, its
// attained service, arrival.
func (a *admission) before(x, y *waiter, now time.Time) int {
	if x.class != y.class {
		return x.class - y.class
	}
	if x.root.inflight != y.root.inflight {
		return x.root.inflight - y.root.inflight
	}
	if sx, sy := x.root.attained(now), y.root.attained(now); sx != sy {
		if sx < sy {
			return -1
		}
		return 1
	}
	return int(x.seq) - int(y.seq)
}

// attained is the tree's service decayed to now.
func (r *root) attained(now time.Time) float64 {
	return r.service * math.Exp2(-now.Sub(r.stamp).Seconds()/serviceHalfLife.Seconds())
}

// placed says where an admitted request was placed (rank < 0: nowhere, it
// holds no slot and is over).
func (a *admission) placed(t *admitTicket, rank int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.placed {
		return
	}
	t.placed = true
	if a.pending[t.charged]--; a.pending[t.charged] <= 0 {
		delete(a.pending, t.charged)
	}
	if rank >= 0 {
		t.root.lastRank = rank
		return
	}
	t.root.inflight--
	a.dispatch(a.clock())
}

// release ends an admitted, placed request: its tokens count to its tree's
// service, and the queue is served again.
func (a *admission) release(t *admitTicket, tokens int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	r := t.root
	r.inflight--
	r.lastEnd = now
	r.service = r.attained(now) + float64(tokens)
	r.stamp = now
	hold := now.Sub(t.start).Seconds()
	if a.meanHold == 0 {
		a.meanHold = hold
	} else {
		a.meanHold += (hold - a.meanHold) / 16
	}
	a.dispatch(now)
}

// retryAfter is the seconds a client told to retry is asked to wait: the
// queue's expected drain time, 1 to 60.
func (a *admission) retryAfter() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.meanHold * float64(len(a.queue)+1) / float64(max(a.slots, 1))
	return int(min(max(math.Ceil(s), 1), 60))
}

// status reads the queue now: counts and the active trees, most in
// flight first (maxStatusTrees at most).
func (a *admission) status() *schema.Admission {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	st := &schema.Admission{Queued: len(a.queue), Admitted: a.admitted, Waited: a.queued, Busy: a.busy}
	for k, r := range a.roots {
		if r.inflight > 0 || r.queued > 0 || now.Sub(r.lastEnd) <= rootActiveWindow {
			st.ActiveTrees++
			st.Trees = append(st.Trees, schema.Tree{Root: decision.Session(k), InFlight: r.inflight, Queued: r.queued,
				Tokens: math.Round(r.attained(now))})
		}
	}
	slices.SortFunc(st.Trees, func(x, y schema.Tree) int {
		if x.InFlight+x.Queued != y.InFlight+y.Queued {
			return y.InFlight + y.Queued - x.InFlight - x.Queued
		}
		return strings.Compare(x.Root, y.Root)
	})
	st.Trees = st.Trees[:min(len(st.Trees), maxStatusTrees)]
	return st
}

// maxStatusTrees bounds the trees the status lists.
const maxStatusTrees = 32

// OverloadMessage is the error message of a request told to retry.
const OverloadMessage = "the warden's engines are saturated and its admission queue is past its bound (--queue-max-wait, --queue-max-len): retry after the Retry-After seconds"

// OverloadStatus is the status a request told to retry is answered with:
// 529 (Anthropic's overloaded_error) on /v1/messages, 429 elsewhere.
func OverloadStatus(path string) int {
	if strings.HasPrefix(path, "/v1/messages") {
		return 529
	}
	return http.StatusTooManyRequests
}
