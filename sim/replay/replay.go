// Package replay is a discrete-event replay of the bench's agent load
// through the warden's placement (place.Placer, the type the warden's proxy
// places with) onto the simulator's scheduler and step-time model (the same code `warden sim
// serve` runs), on a virtual clock: no HTTP, no wall clock. A 3-minute
// stage at 32 sessions replays in about a second, deterministically, so
// policies can be compared on the same load and their internals
// (per-replica queue waits, sessions, preemptions, re-prefilled tokens)
// read directly. The team uses it for calibration and routing research;
// its entry points are its tests: `WARDEN_REPLAY=1 go test -run TestReplay
// -v ./sim/replay/` (each test's doc comment says what it measures and
// which environment variables it reads). It is not part of the warden:
// nothing in the warden's path imports it, and it changes no placement or
// simulator state beyond the instances it builds.
package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/sim/model"
)

// replayLoad is one stage of the bench's workload.
type replayLoad struct {
	replicas, sessions int
	system, first      int                    // tokens: shared system prompt, unique first message
	turn, out, turns   int                    // new user tokens per follow-up, output per turn, follow-ups
	firstOf            func(k int) (int, int) // optional per-session (first tokens, follow-ups)
	stage              float64                // measured seconds from the synchronized start
	stages             []int                  // carry mode: one pool of sessions grown at each stage (bench --carry); nil = one stage of `sessions`
	rtt                float64                // client round trip (bench --client-rtt), sim seconds
	profile            string                 // sim profile; "" = model.DefaultProfile
	tune               func(p *model.Profile) // optional changes to the profile (calibration sweeps)
	kvTokens           int                    // per replica; 0 = the reference profile's
	hostGiB            float64                // a host-RAM KV tier per replica (vLLM's native offloading, as the simulator models it); 0 none
	scrape, refresh    float64                // proxy scrape and balancer refresh periods (sim seconds)
	cfg                func(c *place.Config)  // policy knobs
	policy             string
	debug              func(string, ...any)
	grace              float64
	keep               *replay // runAll: where run leaves its per-stage results
	jitter             int     // first-message tokens vary by up to this much (the reference measured 7.2-7.5k)
	seed               uint64
	home               func(worker int) int // optional: the replica a new session of this worker slot is placed on (imposed homes)
	stagePolicy        []string             // optional: the policy of each stage (carry); "" or missing keeps the previous one

	// Conversation-level scheduling (an experiment on top of the policy):
	// each replica runs at most slots conversations at a time; a turn of
	// any other conversation homed there waits at the proxy. A running
	// conversation yields its slot after quantum turns when another waits
	// for that replica. quantum 0: off.
	quantum, slots int
	anySlot        bool    // a waiting conversation takes a free slot on any replica (moving)
	maxHold        float64 // a turn held this long (seconds) is admitted over the slots; 0 = no bound
}

func refLoad(policy string, sessions int) replayLoad {
	return replayLoad{replicas: 4, sessions: sessions, system: 3500, first: 7300, turn: 400, out: 256, turns: 5,
		stage: 180, scrape: 10, refresh: 1, policy: policy, jitter: 150}
}

// replayResult is the bench's row plus the internals.
type replayResult struct {
	p50, p95, p95all, outPerMin, hitPct float64
	turns, late, waited                 int
	firstTurns                          int   // conversations' first turns among turns
	computed                            int64 // prompt tokens computed (not cached)
	preempt                             int64
	reprefill                           int64     // prompt tokens computed again (not new this turn)
	repWait, repSess                    []float64 // per replica: mean TTFB, mean active sessions homed
	running, waiting                    float64   // engine requests running / waiting, mean per replica
	busy                                float64   // replicas with a request running, mean (the bench's "replicas busy")
	moves                               int
}

// rEngine is one simulated engine, a place.Replica to the replay's Placer.
type rEngine struct {
	rank    int
	sched   *model.Scheduler
	busy    bool
	end     float64
	batch   model.Batch
	wake    float64           // with a host tier: an empty step waits for this transfer's end (0 none)
	scraped place.ReplicaView // running, waiting, KV as of the last scrape
	fly     int               // requests placed here and not finished
}

// replayMaxNumSeqs is every simulated engine's max_num_seqs.
const replayMaxNumSeqs = 32

func (e *rEngine) Rank() int { return e.rank }

// View is the engine as the proxy sees it: always healthy, the exact
// in-flight count, the last scrape's running, waiting and KV use.
func (e *rEngine) View(time.Time) place.ReplicaView {
	v := e.scraped
	v.Rank, v.Healthy, v.InFlight, v.MaxNumSeqs = e.rank, true, e.fly, replayMaxNumSeqs
	v.KVCapacity = (e.sched.Pool().NumBlocks() - 1) * 16
	if e.sched.HasHostTier() { // the warden learns it from the engine's metrics (engine.Stats.HostKVTokens)
		v.HostKVTokens = e.sched.HostSnapshot().Blocks * 16
	}
	return v
}

func (e *rEngine) Sent() { e.fly++ }

type rSession struct {
	id, k        int
	key          string
	ctx          []uint32
	turn, turns  int
	turnTok      int
	next         uint32
	homeKnown    bool // placed before (the Placer's table has its home): for the conversation slots
	home         int
	lastComputed int // tokens new in the current request
}

type rReq struct {
	s      *rSession
	seq    *model.Seq
	rank   int
	submit float64
	first  float64
	pl     place.Placement[*rEngine]
	arrive float64
	newTok int
	held   bool // told to wait before: counted among the Placer's held
}

type replay struct {
	load     replayLoad
	prof     model.Profile
	eng      []*rEngine
	placer   *place.Placer[*rEngine]
	cur      *rReq // the request being placed (Override reads it)
	t        float64
	held     []*rReq // waiting at the proxy
	reqs     map[*model.Seq]*rReq
	res      replayResult
	ttfb     []float64
	all      []float64
	ranks    []int
	sessAcc  []float64
	samples  int
	nextID   uint64
	stopped  bool
	sysToks  []uint32
	tok      uint32
	sessions int
	repCount []int
	debug    func(string, ...any)
	jrng     *rand.Rand
	results  []replayResult
	stageIdx int
	workers  int
	arrivals []*rReq
	winStart float64
	hq       [3]int64
	run      []map[*rSession]int // conversation scheduling: per replica, running conversations and their turns this quantum
}

func (l replayLoad) run() replayResult {
	if l.profile == "" {
		l.profile = model.DefaultProfile
	}
	prof, ok := model.Profiles[l.profile]
	if !ok {
		panic("replay: unknown sim profile " + l.profile)
	}
	if l.tune != nil {
		l.tune(&prof)
	}
	kv := l.kvTokens
	if kv == 0 {
		kv = prof.KVTokens(0.92, 32, 16)
		if prof.FitKVTokens > 0 {
			kv = prof.FitKVTokens
		}
	}
	if l.stages == nil {
		l.stages = []int{l.sessions}
	}
	p := &replay{}
	if l.keep != nil {
		p = l.keep
	}
	*p = replay{load: l, prof: prof, reqs: map[*model.Seq]*rReq{}}
	policy := place.Config{Policy: l.policy}
	if l.cfg != nil {
		l.cfg(&policy)
	}
	// The warden's placement on the virtual clock: sessions never expire
	// and every conversation placed counts as active on its home (a fixed
	// active window: the tables of docs/router.md were computed so), and
	// the balancer view is refreshed on the replay's own tick (refresh).
	p.placer = place.NewPlacer[*rEngine](place.PlacerConfig{Config: policy, Grace: l.grace, Clock: p.now,
		ActiveWindow: 100 * 365 * 24 * time.Hour, Rand: rand.New(rand.NewPCG(1, 2)), Override: p.override})
	p.debug = l.debug
	p.jrng = rand.New(rand.NewPCG(l.seed, 7))
	for i := range l.replicas {
		s := model.NewScheduler(model.SchedConfig{MaxNumSeqs: replayMaxNumSeqs, MaxBatchedTokens: 2048, MaxModelLen: kv, BlockSize: 16,
			ReserveFullISL: true, PrefixStats: model.StatsAdmission, Host: model.HostTier(l.hostGiB, prof, 16)},
			model.NewBlockPool(kv/16+1))
		p.eng = append(p.eng, &rEngine{rank: i, sched: s})
		p.ranks = append(p.ranks, i)
	}
	p.placer.SetReplicas(p.eng)
	p.res.repWait = make([]float64, l.replicas)
	p.res.repSess = make([]float64, l.replicas)
	p.sysToks = p.fresh(l.system)
	p.load = l
	p.loop()
	return p.results[len(p.results)-1]
}

// runAll replays every stage of a carry load.
func (l replayLoad) runAll() []replayResult {
	p := &replay{}
	l.keep = p
	l.run()
	return p.results
}

// fresh returns n tokens never used before in this replay.
func (p *replay) fresh(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		p.tok++
		t[i] = p.tok
	}
	return t
}

func (p *replay) startSession(worker int) {
	id := p.sessions
	p.sessions++
	first, turns := p.load.first, p.load.turns
	if p.load.jitter > 0 {
		first += p.jrng.IntN(2*p.load.jitter+1) - p.load.jitter
	}
	if p.load.firstOf != nil {
		first, turns = p.load.firstOf(id)
	}
	s := &rSession{id: id, k: worker, key: fmt.Sprintf("s%d", id), turns: turns, turnTok: p.load.turn}
	s.ctx = append(slices.Clone(p.sysToks), p.fresh(first)...)
	s.lastComputed = first
	p.send(s)
}

func (p *replay) now() time.Time {
	return time.Unix(0, 0).Add(time.Duration(p.t * float64(time.Second)))
}

// bodyBytes mimics an Anthropic request body of n prompt tokens.
func bodyBytes(n int) int { return n*4 + 200 }

// send hands a session's next request to the proxy.
func (p *replay) send(s *rSession) {
	q := &rReq{s: s, submit: p.t, newTok: s.lastComputed, arrive: p.t + p.load.rtt}
	if p.load.rtt <= 0 {
		p.route(q)
		return
	}
	p.arrivals = append(p.arrivals, q)
}

// route hands a request to the placement (the Placer) and, when placed,
// to its engine; false when it is held at the proxy.
func (p *replay) route(q *rReq) bool {
	s := q.s
	p.cur = q
	pl := p.placer.Decide(place.Request{Key: s.key, BodyBytes: bodyBytes(len(s.ctx)),
		Waited: time.Duration((p.t - q.arrive) * float64(time.Second)), Held: q.held})
	p.cur = nil
	if pl.Reason == place.ReasonWait {
		q.held = true
		if !slices.Contains(p.held, q) {
			p.held = append(p.held, q)
			p.res.waited++
		}
		return false
	}
	if pl.Rank < 0 {
		panic("replay: no replica")
	}
	q.held = false
	if pl.Known && (pl.Reason == place.ReasonFailover || pl.Reason == place.ReasonMove) {
		p.res.moves++
	}
	s.homeKnown, s.home = true, pl.Home
	q.rank, q.pl = pl.Rank, pl
	p.nextID++
	q.seq = model.NewSeq(p.nextID, slices.Clone(s.ctx), p.load.out, 16)
	p.reqs[q.seq] = q
	p.eng[pl.Rank].sched.Add(q.seq)
	return true
}

// override is the Placer's Override: the load's imposed homes and the
// conversation slots (quantum) on top of the policy's decision, for the
// request being routed; a hold is ReasonWait.
func (p *replay) override(_ place.Request, d place.Decision, snap []place.ReplicaView, sv place.SessionView) place.Decision {
	q := p.cur
	if p.load.home != nil && !sv.Known {
		d = place.Decision{Rank: p.load.home(q.s.k), Reason: place.ReasonNew}
	}
	if d.Reason == place.ReasonWait {
		if p.debug != nil && !slices.Contains(p.held, q) {
			p.debug("t=%.1f wait %+v snap %+v", p.t, sv, snap)
		}
		return d
	}
	if d.Rank < 0 || p.load.quantum <= 0 {
		return d
	}
	if p.load.anySlot && !p.admitQuantum(q.s, d.Rank) {
		// It yielded its slot, so its prefix is probably evicted at home:
		// any replica's free slot serves it as well (a move).
		for i := range p.eng {
			if p.admitQuantum(q.s, i) {
				if sv.Known && i != sv.Home {
					d = place.Decision{Rank: i, Reason: place.ReasonMove}
				} else {
					d.Rank = i
				}
				break
			}
		}
	}
	if p.load.maxHold > 0 && p.t-q.arrive >= p.load.maxHold {
		p.forceQuantum(q.s, d.Rank) // waited long enough: admitted over the slots
	}
	if !p.admitQuantum(q.s, d.Rank) {
		return place.Decision{Rank: -1, Reason: place.ReasonWait}
	}
	return d
}

// admitQuantum: s may send a turn to rank when it holds one of the
// replica's slots or a slot is free (it takes it).
func (p *replay) admitQuantum(s *rSession, rank int) bool {
	if p.run == nil {
		p.run = make([]map[*rSession]int, len(p.eng))
		for i := range p.run {
			p.run[i] = map[*rSession]int{}
		}
	}
	if _, ok := p.run[rank][s]; ok {
		return true
	}
	if len(p.run[rank]) >= p.load.slots {
		return false
	}
	for i := range p.run {
		delete(p.run[i], s)
	}
	p.run[rank][s] = 0
	return true
}

// forceQuantum gives s a slot on rank beyond the replica's count.
func (p *replay) forceQuantum(s *rSession, rank int) {
	p.admitQuantum(s, rank) // allocates the sets
	for i := range p.run {
		delete(p.run[i], s)
	}
	p.run[rank][s] = 0
}

// yieldQuantum counts a finished turn of s on rank; s gives up its slot
// when it ended, or when its quantum is used and another conversation
// waits for the replica.
func (p *replay) yieldQuantum(s *rSession, rank int, ended bool) {
	if p.run == nil {
		return
	}
	if ended {
		delete(p.run[rank], s)
		return
	}
	if _, ok := p.run[rank][s]; !ok {
		return
	}
	p.run[rank][s]++
	if p.run[rank][s] < p.load.quantum {
		return
	}
	for _, q := range p.held {
		if !q.s.homeKnown || q.s.home == rank {
			delete(p.run[rank], s)
			return
		}
	}
	p.run[rank][s] = 0 // nobody waits: a new quantum
}

// retryHeld asks again for every request held at the proxy, oldest first.
func (p *replay) retryHeld() {
	held := p.held
	p.held = nil
	for _, q := range held {
		if !p.route(q) && !slices.Contains(p.held, q) {
			p.held = append(p.held, q)
		}
	}
}

func (p *replay) scrape() {
	for _, e := range p.eng {
		e.scraped = place.ReplicaView{Running: float64(e.sched.NumRunning()), Waiting: float64(e.sched.NumWaiting()),
			KVUsed: e.sched.Pool().Usage()}
	}
}

// refresh is the balancer's periodic stats sample.
func (p *replay) refresh() { p.placer.RefreshBalancers() }

// loop runs the event loop: each stage for load.stage seconds (growing the
// pool of sessions to the stage's count at its start), then a drain.
func (p *replay) loop() {
	nextScrape, nextRefresh, nextSample := 0.0, 0.0, 0.0
	stageEnd := 0.0
	p.stageIdx = -1
	for {
		if !p.stopped && p.t >= stageEnd {
			if p.stageIdx >= 0 {
				p.closeStage()
			}
			p.stageIdx++
			if p.stageIdx == len(p.load.stages) {
				p.stopped = true
			} else {
				p.openStage()
				stageEnd = p.t + p.load.stage
			}
		}
		for _, e := range p.eng {
			if !e.busy && !e.sched.Idle() && e.wake <= p.t {
				p.step(e)
			}
		}
		next := math.Inf(1)
		for _, e := range p.eng {
			if e.busy {
				next = min(next, e.end)
			}
			if !e.busy && e.wake > p.t {
				next = min(next, e.wake)
			}
		}
		for _, q := range p.arrivals {
			next = min(next, q.arrive)
		}
		if math.IsInf(next, 1) && len(p.held) == 0 && p.stopped {
			break
		}
		if p.stopped && p.t > stageEnd+600 {
			break
		}
		next = min(next, nextScrape, nextRefresh)
		if !p.stopped {
			next = min(next, stageEnd, nextSample)
		}
		if len(p.held) > 0 {
			next = min(next, p.t+0.5) // the proxy's wait timer
		}
		p.t = max(p.t, next)
		p.tick(&nextScrape, &nextRefresh, &nextSample)
		for _, e := range p.eng {
			if e.busy && e.end <= p.t {
				e.busy = false
				p.complete(e)
			}
		}
		p.arrive()
		p.retryHeld()
	}
}

// step starts e's next engine step at p.t. With a host tier it runs as the
// simulator's engine does (model.Engine.stepWithHost): the scheduler learns
// the step's start (transfers done by then take effect) and its end (the
// step's stores start then), and a step with nothing to compute while loads
// or stores are in flight waits for the next one to complete.
func (p *replay) step(e *rEngine) {
	e.wake = 0
	host := e.sched.HasHostTier()
	if host {
		e.sched.SetNow(p.t)
	}
	e.batch = e.sched.Schedule()
	if host && len(e.batch.Items) == 0 {
		if next, ok := e.sched.NextHostEvent(); ok {
			e.sched.StepEnd(p.t)
			e.wake = next
			return
		}
	}
	e.end, e.busy = p.t+p.prof.StepSeconds(e.batch.Cost()), true
	if host {
		e.sched.StepEnd(e.end)
	}
}

// tick runs the periodic scrape, balancer refresh and sampling that are due.
func (p *replay) tick(nextScrape, nextRefresh, nextSample *float64) {
	if p.t >= *nextScrape {
		p.scrape()
		*nextScrape = p.t + p.load.scrape
	}
	if p.t >= *nextRefresh {
		p.refresh()
		*nextRefresh = p.t + p.load.refresh
	}
	if p.t >= *nextSample && !p.stopped {
		active := p.placer.Counts(p.now(), p.ranks).Active
		for r, e := range p.eng {
			p.res.repSess[r] += float64(active[r])
			p.res.running += float64(e.sched.NumRunning()) / float64(len(p.eng))
			p.res.waiting += float64(e.sched.NumWaiting()) / float64(len(p.eng))
			if e.sched.NumRunning() > 0 {
				p.res.busy++
			}
		}
		p.samples++
		*nextSample = p.t + 1
	}
}

// arrive routes the requests whose client round trip is over.
func (p *replay) arrive() {
	var keep []*rReq
	for _, q := range p.arrivals {
		if q.arrive <= p.t {
			p.route(q)
		} else {
			keep = append(keep, q)
		}
	}
	p.arrivals = keep
}

// openStage resets the per-stage accumulators and grows the session pool.
func (p *replay) openStage() {
	p.res = replayResult{repWait: make([]float64, len(p.eng)), repSess: make([]float64, len(p.eng))}
	p.ttfb, p.all, p.samples, p.repCount = nil, nil, 0, nil
	p.winStart = p.t
	p.hq = p.counters()
	if sp := p.load.stagePolicy; p.stageIdx < len(sp) && sp[p.stageIdx] != "" {
		p.placer.SetPolicy(sp[p.stageIdx])
	}
	for p.workers < p.load.stages[p.stageIdx] {
		p.startSession(p.workers)
		p.workers++
	}
}

func (p *replay) counters() [3]int64 {
	var c [3]int64
	for _, e := range p.eng {
		c[0] += e.sched.Counters.PrefixHits
		c[1] += e.sched.Counters.PrefixQueries
		c[2] += e.sched.Counters.Preemptions
	}
	return c
}

// closeStage computes the stage's row.
func (p *replay) closeStage() {
	c := p.counters()
	p.res.hitPct = 100 * float64(c[0]-p.hq[0]) / math.Max(1, float64(c[1]-p.hq[1]))
	p.res.preempt = c[2] - p.hq[2]
	for _, q := range p.held {
		p.all = append(p.all, p.t-q.submit)
	}
	p.results = append(p.results, p.finish())
}

// complete applies a finished step: first tokens, finished turns, next turns.
func (p *replay) complete(e *rEngine) {
	emitted, finished := e.sched.Complete(e.batch, func(q *model.Seq) uint32 {
		p.tok++
		return p.tok
	})
	for _, q := range emitted {
		if r := p.reqs[q]; r != nil && q.Output == 1 {
			r.first = p.t
		}
	}
	for _, q := range finished {
		r := p.reqs[q]
		delete(p.reqs, q)
		p.eng[r.rank].fly--
		p.finishTurn(r)
	}
}

func (p *replay) finishTurn(r *rReq) {
	q, s := r.seq, r.s
	cached := max(q.CachedTokens, 0)
	u := place.Report{Known: true, Prompt: uint64(q.NumPrompt), Cached: uint64(cached), Completion: uint64(q.Output)}
	p.placer.End(&r.pl, true, u, r.first-r.arrive)
	if !p.stopped {
		p.res.turns++
		p.ttfb = append(p.ttfb, r.first-r.submit)
		p.all = append(p.all, r.first-r.submit)
		p.res.outPerMin += float64(q.Output)
		p.res.reprefill += int64(max(0, q.NumPrompt-cached-r.newTok))
		p.res.computed += int64(q.NumPrompt - cached)
		if s.turn == 0 {
			p.res.firstTurns++
		}
		p.res.repWait[r.rank] += r.first - r.submit
		p.repN(r.rank)
	} else {
		p.res.late++
	}
	s.ctx = append(s.ctx, q.Tokens[q.NumPrompt:]...)
	if p.load.quantum > 0 {
		p.yieldQuantum(s, r.rank, s.turn == s.turns)
	}
	if p.stopped {
		return
	}
	if s.turn == s.turns {
		p.startSession(s.k)
		return
	}
	s.turn++
	s.ctx = append(s.ctx, p.fresh(s.turnTok)...)
	s.lastComputed = s.turnTok + q.Output
	p.send(s)
}

func (p *replay) repN(rank int) {
	if p.repCount == nil {
		p.repCount = make([]int, len(p.eng))
	}
	p.repCount[rank]++
}

func (p *replay) finish() replayResult {
	r := p.res
	slices.Sort(p.ttfb)
	if len(p.ttfb) > 0 {
		r.p50, r.p95 = quantileF(p.ttfb, 0.5), quantileF(p.ttfb, 0.95)
	}
	slices.Sort(p.all)
	if len(p.all) > 0 {
		r.p95all = quantileF(p.all, 0.95)
	}
	r.outPerMin = r.outPerMin * 60 / p.load.stage
	for i := range r.repWait {
		if p.repCount != nil && p.repCount[i] > 0 {
			r.repWait[i] /= float64(p.repCount[i])
		}
		r.repSess[i] /= math.Max(1, float64(p.samples))
	}
	r.running /= math.Max(1, float64(p.samples))
	r.waiting /= math.Max(1, float64(p.samples))
	r.busy /= math.Max(1, float64(p.samples))
	return r
}

func quantileF(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	return xs[lo] + (pos-float64(lo))*(xs[hi]-xs[lo])
}
