package model

// Prefix-query counting modes (docs/vllm-scheduler.md R4.4).
const (
	StatsAdmission = "admission"  // vLLM >= 0.26 (PR #48860): once, at admission; preempted excluded
	StatsLookup    = "lookup"     // vLLM 0.11-0.25: every lookup, preempted lookups excluded
	StatsLookupAll = "lookup-all" // vLLM 0.10: every lookup, preempted included
)

// Seq is one request inside the engine: its tokens (prompt, then outputs),
// progress and KV blocks. Fields are owned by the Scheduler.
type Seq struct {
	ID           uint64
	Tokens       []uint32 // prompt followed by generated tokens
	NumPrompt    int
	MaxTokens    int // tokens to generate; the request finishes after that many
	Computed     int // tokens whose KV is computed (or scheduled this step)
	CachedTokens int // prefix hit at first admission (usage); -1 before
	Preemptions  int
	Output       int    // generated tokens so far
	Owner        any    // engine-side data
	Session      string // session id its KV events carry ("" none)
	ReportFull   bool   // kv_cache_report_mode "full": prefix hits re-reported as KV events

	blocks    []*Block
	hashes    []uint64 // chain hashes of the full blocks of Tokens
	numCached int      // leading blocks registered in the cache
	blockSize int
	host      *seqHost // host-RAM KV tier state (nil without the tier)
}

// NewSeq makes a waiting sequence for prompt tokens.
func NewSeq(id uint64, prompt []uint32, maxTokens, blockSize int) *Seq {
	q := &Seq{ID: id, Tokens: prompt, NumPrompt: len(prompt), MaxTokens: maxTokens, CachedTokens: -1, blockSize: blockSize}
	q.extendHashes()
	return q
}

func (q *Seq) extendHashes() {
	bs := q.blockSize
	for len(q.hashes) < len(q.Tokens)/bs {
		i := len(q.hashes)
		var parent uint64
		if i > 0 {
			parent = q.hashes[i-1]
		}
		q.hashes = append(q.hashes, chainHash(parent, q.Tokens[i*bs:(i+1)*bs]))
	}
}

// SchedConfig holds the scheduler's limits and version switches.
type SchedConfig struct {
	MaxNumSeqs       int
	MaxBatchedTokens int
	MaxModelLen      int // longest sequence (prompt + output)
	BlockSize        int
	ReserveFullISL   bool       // full-sequence admission gate (R2.3)
	PrefixStats      string     // StatsAdmission, StatsLookup or StatsLookupAll
	WatermarkBlocks  int        // blocks kept free when admitting into a busy engine (R2.4)
	Host             HostConfig // host-RAM KV tier (offload.go); off when Host.Blocks is 0
}

// Counters are the scheduler's monotonic counts, in tokens where vLLM's are.
type Counters struct {
	PrefixQueries    int64
	PrefixHits       int64
	Preemptions      int64
	PromptTokens     int64
	GenerationTokens int64

	// The host-RAM KV tier's (offload.go; zero without it): the connector's
	// prefix-cache counters in tokens, and the offloading transfers.
	ExternalQueries   int64
	ExternalHits      int64
	HostLoadBytes     int64
	HostLoadSeconds   float64
	HostStoreBytes    int64
	HostStoreSeconds  float64
	HostAllocFailures int64
}

// Scheduled is one request's share of a step: N tokens from position Start.
type Scheduled struct {
	Seq    *Seq
	Start  int
	N      int
	Decode bool
}

// Batch is what one step runs.
type Batch struct {
	Items     []Scheduled
	Preempted []*Seq
}

// Cost summarises the batch for the step-time model.
func (b Batch) Cost() StepCost {
	var c StepCost
	for _, it := range b.Items {
		if it.Decode {
			c.Decodes++
			c.DecodeContext += it.Start + 1
			continue
		}
		n, s := float64(it.N), float64(it.Start)
		c.PrefillTokens += it.N
		c.PrefillPosSum += n*s + n*(n-1)/2
	}
	return c
}

// Scheduler is vLLM V1's FCFS scheduler over a BlockPool (docs/vllm-scheduler.md
// §9): phase A over running requests in admission order with preemption of
// the newest, then phase B admitting waiting requests in FIFO order with
// head-of-line blocking. It has no clock; the engine times the steps. Not
// safe for concurrent use.
type Scheduler struct {
	cfg      SchedConfig
	pool     *BlockPool
	running  []*Seq
	waiting  []*Seq
	holding  []*Seq    // loading from the host tier, or loaded and not yet running (vLLM's kv_holding_waiting)
	host     *hostTier // nil without the tier
	kv       *kvLog    // KV events (nil: off; kvevents.go)
	Counters Counters
}

// NewScheduler makes a scheduler over pool, with a host-RAM KV tier when
// cfg.Host.Blocks > 0.
func NewScheduler(cfg SchedConfig, pool *BlockPool) *Scheduler {
	s := &Scheduler{cfg: cfg, pool: pool}
	if cfg.Host.Blocks > 0 {
		s.host = &hostTier{cfg: cfg.Host, pool: newHostPool(cfg.Host.Blocks), beingLoaded: map[uint64]int{}}
	}
	return s
}

// Pool returns the block pool.
func (s *Scheduler) Pool() *BlockPool { return s.pool }

// NumRunning and NumWaiting are vLLM's gauges (preempted requests wait).
func (s *Scheduler) NumRunning() int { return len(s.running) }

// NumWaiting counts waiting and preempted requests (and, with the host
// tier, those loading from it or loaded and not yet running).
func (s *Scheduler) NumWaiting() int { return len(s.waiting) + len(s.holding) }

// Idle reports whether there is nothing to schedule. With the host tier,
// requests finished since the last step keep it busy for one more (empty)
// step, as in vLLM (has_finished_requests): that step offers their last
// blocks and touches what they used.
func (s *Scheduler) Idle() bool {
	return len(s.running) == 0 && len(s.waiting) == 0 && len(s.holding) == 0 && (s.host == nil || len(s.host.finished) == 0)
}

// Add appends a new request to the waiting queue.
func (s *Scheduler) Add(q *Seq) { s.waiting = append(s.waiting, q) }

// Abort removes q wherever it is and frees its blocks. Call between steps.
func (s *Scheduler) Abort(q *Seq) {
	s.running = removeSeq(s.running, q)
	s.waiting = removeSeq(s.waiting, q)
	s.release(q)
	if s.host != nil {
		s.holding = removeSeq(s.holding, q)
		s.host.finished = append(s.host.finished, q)
	}
}

func removeSeq(list []*Seq, q *Seq) []*Seq {
	for i, x := range list {
		if x == q {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

func (s *Scheduler) release(q *Seq) {
	s.pool.Free(q.blocks)
	q.blocks, q.numCached = nil, 0
}

// Schedule runs one scheduling step and returns the batch. Scheduled tokens
// count as computed and their full blocks are cached at once (R5.1).
func (s *Scheduler) Schedule() Batch {
	var b Batch
	budget := s.cfg.MaxBatchedTokens
	for i := 0; i < len(s.running) && budget > 0; { // phase A
		r := s.running[i]
		n := min(len(r.Tokens)-r.Computed, budget, s.cfg.MaxModelLen-1-r.Computed)
		if n <= 0 {
			i++
			continue
		}
		stop := false
		for !s.alloc(r, n, nil, false, 0) {
			v := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			s.preempt(v)
			b.Preempted = append(b.Preempted, v)
			if v == r {
				stop = true
				break
			}
		}
		if stop {
			break
		}
		b.Items = append(b.Items, s.schedule(r, n))
		budget -= n
		i++
	}
	if len(b.Preempted) == 0 { // R1.4: a step that preempts admits no one
		if s.host != nil {
			b.Items = s.admitTier(b.Items, budget)
		} else {
			b.Items = s.admit(b.Items, budget)
		}
	}
	if s.host != nil {
		s.planStores(b)
	}
	return b
}

// admit is phase B: FIFO admission with head-of-line blocking (R1.7).
func (s *Scheduler) admit(items []Scheduled, budget int) []Scheduled {
	bs := s.cfg.BlockSize
	for len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		r := s.waiting[0]
		hits := s.pool.Lookup(r.hashes[:(len(r.Tokens)-1)/bs])
		s.reportHits(r, hits)
		hitTok := len(hits) * bs
		if s.cfg.PrefixStats == StatsLookupAll || (s.cfg.PrefixStats == StatsLookup && r.Preemptions == 0) {
			s.countQuery(r, hitTok)
		}
		n := min(len(r.Tokens)-hitTok, budget)
		wm := 0
		if len(s.running) > 0 {
			wm = s.cfg.WatermarkBlocks
		}
		if !s.alloc(r, n, hits, s.cfg.ReserveFullISL, wm) {
			break
		}
		if s.cfg.PrefixStats == StatsAdmission && r.Preemptions == 0 {
			s.countQuery(r, hitTok)
		}
		s.waiting = s.waiting[1:]
		s.running = append(s.running, r)
		r.Computed, r.numCached = hitTok, len(hits)
		if r.CachedTokens < 0 {
			r.CachedTokens = hitTok
		}
		items = append(items, s.schedule(r, n))
		budget -= n
	}
	return items
}

func (s *Scheduler) countQuery(r *Seq, hitTok int) {
	s.Counters.PrefixQueries += int64(len(r.Tokens))
	s.Counters.PrefixHits += int64(hitTok)
}

// alloc is allocate_slots: charge = new blocks + free hit blocks (+ watermark)
// must fit the free count; with gate, the whole sequence must fit too.
func (s *Scheduler) alloc(q *Seq, n int, hits []*Block, gate bool, wm int) bool {
	return s.allocReserve(q, n, hits, gate, wm, 0)
}

// allocReserve is alloc that also leaves reserve blocks free for the
// allocation itself (not the gate): vLLM's reserved_blocks for async loads.
func (s *Scheduler) allocReserve(q *Seq, n int, hits []*Block, gate bool, wm, reserve int) bool {
	bs := s.cfg.BlockSize
	freeHits := 0
	for _, h := range hits {
		if h.ref == 0 {
			freeHits++
		}
	}
	held := len(q.blocks)
	charge := func(tokens int) int {
		tokens = min(tokens, s.cfg.MaxModelLen)
		return max(0, cdiv(tokens, bs)-held-len(hits)) + freeHits
	}
	free := s.pool.NumFree()
	if gate && charge(len(q.Tokens))+wm > free {
		return false
	}
	upTo := q.Computed + len(hits)*bs + n
	if charge(upTo)+wm > free-reserve {
		return false
	}
	s.pool.Touch(hits)
	q.blocks = append(q.blocks, hits...)
	if k := cdiv(min(upTo, s.cfg.MaxModelLen), bs) - len(q.blocks); k > 0 {
		q.blocks = append(q.blocks, s.pool.Allocate(k)...)
	}
	return true
}

func cdiv(a, b int) int { return (a + b - 1) / b }

// schedule marks n tokens of q as computed and caches its full blocks.
func (s *Scheduler) schedule(q *Seq, n int) Scheduled {
	it := Scheduled{Seq: q, Start: q.Computed, N: n, Decode: q.Output > 0 && n == 1 && q.Computed == len(q.Tokens)-1}
	q.Computed += n
	full := min(q.Computed, len(q.Tokens)) / s.cfg.BlockSize
	s.stored(q, q.numCached, full)
	for ; q.numCached < full; q.numCached++ {
		s.pool.Cache(q.blocks[q.numCached], q.hashes[q.numCached])
	}
	return it
}

// preempt frees q (tail first), resets it and puts it at the waiting front.
func (s *Scheduler) preempt(q *Seq) {
	s.release(q)
	q.Computed = 0
	q.Preemptions++
	s.Counters.Preemptions++
	s.waiting = append([]*Seq{q}, s.waiting...)
}

// Complete applies a finished forward pass: every request whose computed
// tokens reach its length samples one token (next supplies it). It returns
// the requests that got a token and, of those, the ones that finished (their
// blocks are freed, cached ones to the LRU tail).
func (s *Scheduler) Complete(b Batch, next func(*Seq) uint32) (emitted, finished []*Seq) {
	for _, it := range b.Items {
		q := it.Seq
		if q.Computed < len(q.Tokens) {
			continue // partial prefill: no output (R8.1)
		}
		q.Tokens = append(q.Tokens, next(q))
		q.Output++
		q.extendHashes()
		if q.Output == 1 {
			s.Counters.PromptTokens += int64(q.NumPrompt)
		}
		s.Counters.GenerationTokens++
		emitted = append(emitted, q)
		if q.Output >= q.MaxTokens || len(q.Tokens) >= s.cfg.MaxModelLen {
			s.running = removeSeq(s.running, q)
			s.release(q)
			finished = append(finished, q)
			if s.host != nil {
				s.host.finished = append(s.host.finished, q)
			}
		}
	}
	return emitted, finished
}
