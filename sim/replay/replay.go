// Package replay is a discrete-event replay of the bench's agent load
// through the warden's placement (place.Placer, the type the router core
// places with) onto the simulator's scheduler and step-time model (the
// same code `warden sim serve` runs), on a virtual clock: no HTTP, no wall
// clock. A 3-minute stage at 32 sessions replays in about a second,
// deterministically, so policies can be compared on the same load and
// their internals (per-replica queue waits, sessions, preemptions,
// re-prefilled tokens) read directly. Each engine runs the profile's
// max_num_seqs (Profile.DefaultMaxNumSeqs) with 16-token KV blocks.
//
// The team uses it for calibration and routing research. Its explorations
// (Explorations: the tables behind docs/router.md and docs/calibration.md)
// print and assert nothing, so they are not tests: `go run
// ./sim/replay/cmd/replay` lists them and the environment variables each
// reads, `go run ./sim/replay/cmd/replay NAME` runs one. Its tests are the
// cases that assert (adaptive's admission, the host KV tier). It is not
// part of the warden: nothing in the warden's path imports it, and it
// changes no placement or simulator state beyond the instances it builds.
//
// Files: replay.go the load, the engines and the event loop; experiment.go
// what a load imposes on the policy's decisions (homes, conversation
// slots); stage.go a stage's row; loads.go the reference loads and the
// reference table; explore.go the explorations.
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

// blockSize is the KV block size of every simulated engine, in tokens: the
// simulator's --block-size default and vLLM's on GPUs (no profile sets
// another).
const blockSize = 16

// rEngine is one simulated engine, a place.Replica to the replay's Placer.
type rEngine struct {
	rank    int
	seqs    int // max_num_seqs: the profile's DefaultMaxNumSeqs
	sched   *model.Scheduler
	busy    bool
	end     float64
	batch   model.Batch
	wake    float64           // with a host tier: an empty step waits for this transfer's end (0 none)
	scraped place.ReplicaView // running, waiting, KV as of the last scrape
	fly     int               // requests placed here and not finished
}

func (e *rEngine) Rank() int { return e.rank }

// View is the engine as the proxy sees it: always healthy, the exact
// in-flight count, the last scrape's running, waiting and KV use.
func (e *rEngine) View(time.Time) place.ReplicaView {
	v := e.scraped
	v.Rank, v.Healthy, v.InFlight, v.MaxNumSeqs = e.rank, true, e.fly, e.seqs
	v.KVCapacity = (e.sched.Pool().NumBlocks() - 1) * blockSize
	if e.sched.HasHostTier() { // the warden learns it from the engine's metrics (engine.Stats.HostKVTokens)
		v.HostKVTokens = e.sched.HostSnapshot().Blocks * blockSize
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
		kv = prof.KVTokens(0.92, prof.DefaultMaxNumSeqs, blockSize)
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
		s := model.NewScheduler(model.SchedConfig{MaxNumSeqs: prof.DefaultMaxNumSeqs, MaxBatchedTokens: 2048, MaxModelLen: kv,
			BlockSize: blockSize, ReserveFullISL: true, PrefixStats: model.StatsAdmission, Host: model.HostTier(l.hostGiB, prof, blockSize)},
			model.NewBlockPool(kv/blockSize+1))
		p.eng = append(p.eng, &rEngine{rank: i, seqs: prof.DefaultMaxNumSeqs, sched: s})
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
	q.seq = model.NewSeq(p.nextID, slices.Clone(s.ctx), p.load.out, blockSize)
	p.reqs[q.seq] = q
	p.eng[pl.Rank].sched.Add(q.seq)
	return true
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

// refresh is the Placer's periodic tick, as the warden runs it: the
// balancers' stats sample (and session expiry, which the replay's table
// never needs: its sessions do not expire).
func (p *replay) refresh() { p.placer.Tick() }

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
