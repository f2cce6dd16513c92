package model

import (
	"math"

	"github.com/lmwarden/warden/internal/ilist"
)

// The host-RAM KV tier: vLLM's native KV offloading (--kv-offloading-backend
// native --kv-offloading-size GiB, i.e. the OffloadingConnector with its
// CPUOffloadingSpec and LRU policy), as vLLM 0.32.0 implements it
// (docs/kv-offload.md, "In the simulator", has the rules and their sources):
//
//   - store: every full block of a request's prompt is copied to host memory
//     as soon as it is computed (write-through, not on eviction; only prompt
//     blocks: offload_prompt_only defaults to true), one store job per
//     request per step, started after the step's forward pass, FIFO over the
//     device-to-host link; a block already in host memory is not stored
//     again; no reuse gating (store_threshold 0);
//   - host pool: a fixed number of blocks (the size over the KV bytes of one
//     block on all ranks); when full, the least recently used blocks that no
//     transfer holds are evicted, or the store is dropped (and retried next
//     step); a block's recency is its insertion, then every finished request
//     touches the blocks it stored or reused, its first block last (most
//     recent);
//   - load: a waiting request's lookup, after its GPU prefix hit, takes the
//     longest run of further blocks in host memory (not capped at the last
//     token); if any is still being stored or being loaded by another
//     request, or the request's own stores are in flight, the request is
//     skipped this step (not blocking the queue); otherwise it gets GPU
//     blocks for the whole hit (full-prompt gate, keeping the blocks other
//     in-flight prefills still need), computes nothing and waits
//     (WAITING_FOR_REMOTE_KVS) in the queue of requests holding blocks,
//     while the load runs FIFO over the host-to-device link from the start
//     of that step; at the first step after it completed the request is
//     served first, its loaded blocks enter the GPU prefix cache, and it
//     continues as a prefix hit (a full hit recomputes the last token).
//   - counters: external queries += tokens - GPU hit, external hits += loaded
//     tokens, at admission, not for preempted requests; usage cached_tokens
//     = GPU hit + loaded tokens.

// HostConfig sizes and times the host-RAM KV tier. Blocks 0: no tier.
type HostConfig struct {
	Blocks       int     // host blocks of BlockSize tokens (vLLM's num_chunks; blocks_per_chunk 1)
	BlockBytes   float64 // bytes of one block over all ranks (what the byte counters count)
	BlockSeconds float64 // seconds one block takes over the host link (each rank moves its share at once)
	Latency      float64 // seconds per transfer job on top of its bytes
	Workers      int     // ranks: the transfer-time counters sum over them, as vLLM aggregates its workers
}

// HostTier sizes the tier of --kv-offloading-size for profile p (at its TP
// size) and block size bs, as CPUOffloadingSpec does (v1/kv_offload/cpu/
// spec.py): a block is the per-rank KV bytes of a GPU block times the ranks
// (the size is the whole engine's, summed over its workers), rounded up to
// the 4 KiB page, and the size in bytes is divided by it, rounding down.
func HostTier(gibs float64, p Profile, bs int) HostConfig {
	if gibs <= 0 || bs <= 0 {
		return HostConfig{}
	}
	t := p.TPSize()
	block := p.CardKVBytesPerToken() * float64(bs) * float64(t)
	aligned := math.Ceil(block/4096) * 4096
	return HostConfig{
		Blocks:       int(math.Floor(math.Floor(gibs*GiB) / aligned)),
		BlockBytes:   block,
		BlockSeconds: p.HostBlockSeconds(bs),
		Latency:      p.HostLinkLatency,
		Workers:      t,
	}
}

// hostChunk is one block in host memory.
type hostChunk struct {
	hash    uint64
	idx     int                   // its block index in the storing request (KV events)
	readyAt float64               // when its store completes (simulated seconds); +Inf until the store is timed
	loads   int                   // loads reading it (vLLM's ref_cnt > 0: not evictable)
	lru     ilist.Link[hostChunk] // on hostPool.lru
}

// hostPool is CPUOffloadingManager with the LRU policy
// (v1/kv_offload/cpu/manager.py, policies/lru.py): chunks by hash in
// recency order.
type hostPool struct {
	cap     int
	chunks  map[uint64]*hostChunk
	lru     ilist.List[hostChunk] // recency: front is the least recently used
	pinned  int                   // chunks that loads hold
	pending int                   // chunks whose store has not completed
	kv      *kvLog                // KV events (nil: off)
}

func newHostPool(blocks int) *hostPool {
	return &hostPool{cap: blocks, chunks: map[uint64]*hostChunk{},
		lru: ilist.New(func(c *hostChunk) *ilist.Link[hostChunk] { return &c.lru })}
}

// touch makes c the most recently used.
func (p *hostPool) touch(c *hostChunk) { p.lru.MoveToBack(c) }

// insert adds a chunk whose store is pending, as the most recently used.
func (p *hostPool) insert(hash uint64) *hostChunk {
	c := &hostChunk{hash: hash, readyAt: math.Inf(1)}
	p.chunks[hash] = c
	p.lru.PushBack(c)
	p.pending++
	return c
}

// evict removes the n least recently used chunks that are ready, held by
// no load and not in protected; it removes nothing and returns false when
// there are fewer such chunks.
func (p *hostPool) evict(n int, protected map[uint64]bool, now float64) bool {
	var sel []*hostChunk
	for c := p.lru.Front(); c != nil && len(sel) < n; c = p.lru.Next(c) {
		if c.loads == 0 && c.readyAt <= now && !protected[c.hash] {
			sel = append(sel, c)
		}
	}
	if len(sel) < n {
		return false
	}
	for _, c := range sel {
		p.lru.Remove(c)
		delete(p.chunks, c.hash)
	}
	if p.kv != nil {
		ev := KVEvent{Kind: KVRemoved, Medium: MediumCPU}
		for _, c := range sel {
			ev.Hashes = append(ev.Hashes, c.hash)
		}
		p.kv.add(ev)
	}
	return true
}

func (p *hostPool) reset() {
	p.chunks = map[uint64]*hostChunk{}
	p.lru.Clear()
	p.pinned, p.pending = 0, 0
}

// transfer is one load or store job over the host link.
type transfer struct {
	seq    *Seq
	chunks []*hostChunk
	done   float64
}

// hostTier is the scheduler's side of the tier: the pool, the simulated
// clock the engine gives it, the two link directions (FIFO each) and the
// jobs in flight.
type hostTier struct {
	cfg              HostConfig
	pool             *hostPool
	now              float64
	h2dFree, d2hFree float64 // when each direction of the link is next free
	loads, stores    []*transfer
	untimed          []*transfer    // stores prepared this step, timed by StepEnd
	beingLoaded      map[uint64]int // chunk hash -> loads in flight
	finished         []*Seq         // finished or aborted since the last step
}

// seqHost is a request's tier state (vLLM's RequestOffloadState).
type seqHost struct {
	nextStored int     // next block index to offer for storing
	storeDone  float64 // when its last store completes
	loading    bool    // WAITING_FOR_REMOTE_KVS
	loadDone   float64
	seen       []bool // block indices it stored or reused, touched when it finishes
}

func (s *Scheduler) hostOf(q *Seq) *seqHost {
	if q.host == nil {
		q.host = &seqHost{}
	}
	return q.host
}

func (h *seqHost) see(i int) {
	for len(h.seen) <= i {
		h.seen = append(h.seen, false)
	}
	h.seen[i] = true
}

// HasHostTier reports whether the scheduler has a host-RAM KV tier.
func (s *Scheduler) HasHostTier() bool { return s.host != nil }

// SetNow gives the tier the simulated time of the step about to be
// scheduled: transfers completed by then take effect (loaded requests can
// be promoted, stored blocks be hit, pinned blocks be evicted). No-op
// without the tier.
func (s *Scheduler) SetNow(t float64) {
	h := s.host
	if h == nil {
		return
	}
	h.now = t
	if len(h.untimed) > 0 { // a driver that did not call StepEnd
		s.StepEnd(t)
	}
	for len(h.loads) > 0 && h.loads[0].done <= t {
		for _, c := range h.loads[0].chunks {
			if c.loads--; c.loads == 0 {
				h.pool.pinned--
			}
			if h.beingLoaded[c.hash]--; h.beingLoaded[c.hash] <= 0 {
				delete(h.beingLoaded, c.hash)
			}
		}
		h.loads = h.loads[1:]
	}
	for len(h.stores) > 0 && h.stores[0].done <= t {
		s.hostStored(h.stores[0])
		h.pool.pending -= len(h.stores[0].chunks)
		h.stores = h.stores[1:]
	}
}

// StepEnd times the stores the last Schedule prepared: they start when the
// step's forward pass ends (end), one after another over the
// device-to-host link. No-op without the tier.
func (s *Scheduler) StepEnd(end float64) {
	h := s.host
	if h == nil {
		return
	}
	for _, j := range h.untimed {
		d := h.cfg.Latency + float64(len(j.chunks))*h.cfg.BlockSeconds
		j.done = max(end, h.d2hFree) + d
		h.d2hFree = j.done
		for _, c := range j.chunks {
			c.readyAt = j.done
		}
		hs := s.hostOf(j.seq)
		hs.storeDone = max(hs.storeDone, j.done)
		s.Counters.HostStoreBytes += int64(float64(len(j.chunks)) * h.cfg.BlockBytes)
		s.Counters.HostStoreSeconds += d * float64(max(1, h.cfg.Workers))
		h.stores = append(h.stores, j)
	}
	h.untimed = h.untimed[:0]
}

// NextHostEvent is the earliest time after now at which a transfer in
// flight completes; false when none is.
func (s *Scheduler) NextHostEvent() (float64, bool) {
	h := s.host
	if h == nil {
		return 0, false
	}
	t := math.Inf(1)
	if len(h.loads) > 0 {
		t = h.loads[0].done
	}
	if len(h.stores) > 0 {
		t = min(t, h.stores[0].done)
	}
	return t, !math.IsInf(t, 1) && t > h.now
}

// HostSnapshot is the tier's state for /metrics.
type HostSnapshot struct {
	On             bool
	Blocks         int     // capacity
	Used           int     // blocks held
	UsagePerc      float64 // vllm:kv_offload_cpu_cache_usage_perc: blocks pinned by transfers / capacity
	FetchRunning   int     // requests whose load is in flight
	FetchCompleted int     // loaded, not running yet
}

// HostSnapshot reads the tier's gauges; zero without the tier.
func (s *Scheduler) HostSnapshot() HostSnapshot {
	h := s.host
	if h == nil {
		return HostSnapshot{}
	}
	hs := HostSnapshot{On: true, Blocks: h.pool.cap, Used: len(h.pool.chunks)}
	if h.pool.cap > 0 {
		hs.UsagePerc = float64(h.pool.pinned+h.pool.pending) / float64(h.pool.cap)
	}
	for _, q := range s.holding {
		if q.host != nil && q.host.loading {
			if q.host.loadDone > h.now {
				hs.FetchRunning++
			} else {
				hs.FetchCompleted++
			}
		}
	}
	return hs
}

// ResetHost empties the host pool, like vLLM's reset_prefix_cache with
// reset_external (the connector's reset_cache). Call it only when no block
// is held (after a successful BlockPool.Reset): then nothing is loading.
func (s *Scheduler) ResetHost() {
	h := s.host
	if h == nil {
		return
	}
	h.pool.reset()
	h.loads, h.stores, h.untimed = nil, nil, nil
	h.beingLoaded = map[uint64]int{}
	for _, list := range [][]*Seq{s.running, s.waiting, s.holding, h.finished} {
		for _, q := range list {
			if q.host != nil {
				q.host.nextStored, q.host.storeDone, q.host.seen = 0, 0, nil
			}
		}
	}
}

// hostLookup is the connector's get_num_new_matched_tokens for a request
// whose GPU prefix hit is from blocks: the tokens of the longest run of
// further blocks in host memory, and false when the request must be skipped
// this step (its own stores in flight, a block of the run still being
// stored, or being loaded for another request).
func (s *Scheduler) hostLookup(r *Seq, from int) (int, bool) {
	h, hs := s.host, s.hostOf(r)
	if hs.storeDone > h.now {
		return 0, false
	}
	n, pending := 0, false
	for i := from; i < len(r.hashes); i++ {
		c := h.pool.chunks[r.hashes[i]]
		if c == nil {
			break
		}
		pending = pending || c.readyAt > h.now
		n++
	}
	if n == 0 {
		return 0, true
	}
	if pending {
		return 0, false
	}
	for i := from; i < from+n; i++ {
		if h.beingLoaded[r.hashes[i]] > 0 {
			return 0, false
		}
	}
	return n * s.cfg.BlockSize, true
}

// startLoad pins blocks [from, from+n) of r in host memory and queues their
// load: it starts at the step's start (now) or when the link is free.
func (s *Scheduler) startLoad(r *Seq, from, n int) {
	h, hs := s.host, s.hostOf(r)
	j := &transfer{seq: r}
	for i := from; i < from+n; i++ {
		c := h.pool.chunks[r.hashes[i]]
		if c.loads++; c.loads == 1 {
			h.pool.pinned++
		}
		h.beingLoaded[c.hash]++
		j.chunks = append(j.chunks, c)
		hs.see(i)
	}
	d := h.cfg.Latency + float64(n)*h.cfg.BlockSeconds
	j.done = max(h.now, h.h2dFree) + d
	h.h2dFree = j.done
	h.loads = append(h.loads, j)
	hs.loading, hs.loadDone = true, j.done
	hs.nextStored = from + n // CHUNK_LEVEL: the hit is not stored again
	s.Counters.HostLoadBytes += int64(float64(n) * h.cfg.BlockBytes)
	s.Counters.HostLoadSeconds += d * float64(max(1, h.cfg.Workers))
}

// finishLoad is _update_waiting_for_remote_kv: the loaded blocks enter the
// GPU prefix cache; a full hit recomputes the last token.
func (s *Scheduler) finishLoad(r *Seq) {
	r.host.loading = false
	full := min(r.Computed, len(r.Tokens)) / s.cfg.BlockSize
	s.stored(r, r.numCached, full)
	for ; r.numCached < full; r.numCached++ {
		s.pool.Cache(r.blocks[r.numCached], r.hashes[r.numCached])
	}
	if r.Computed >= len(r.Tokens) {
		r.Computed = len(r.Tokens) - 1
	}
}

// inflightReserve is _inflight_prefill_reserved_blocks: the blocks that
// requests still prefilling or loading need to hold their whole sequence.
func (s *Scheduler) inflightReserve() int {
	bs := s.cfg.BlockSize
	need := func(q *Seq) int {
		return max(0, cdiv(min(len(q.Tokens), s.cfg.MaxModelLen), bs)-len(q.blocks))
	}
	n := 0
	for _, q := range s.running {
		if q.Computed < len(q.Tokens)-1 || (q.Output == 0 && q.Computed < len(q.Tokens)) {
			n += need(q)
		}
	}
	for _, q := range s.holding {
		n += need(q)
	}
	return n
}

// admitTier is phase B with the tier (vLLM's waiting loop with a KV
// connector): the requests holding blocks (loading or loaded) first, then
// the waiting queue; a request whose load is in flight, or whose lookup
// must wait, is skipped and keeps its place; a request with a host hit is
// admitted to load (no tokens, no budget) and joins the holding queue; a
// loaded one continues without a lookup.
func (s *Scheduler) admitTier(items []Scheduled, budget int) []Scheduled {
	bs := s.cfg.BlockSize
	h := s.host
	var skipHold, skipWait []*Seq
	for budget > 0 {
		q := &s.holding
		if len(*q) == 0 {
			q = &s.waiting
		}
		if len(*q) == 0 || len(s.running) >= s.cfg.MaxNumSeqs {
			break
		}
		r := (*q)[0]
		hs := s.hostOf(r)
		if hs.loading {
			if hs.loadDone > h.now {
				*q = (*q)[1:]
				skipHold = append(skipHold, r)
				continue
			}
			s.finishLoad(r)
		}
		wm := 0
		if len(s.running) > 0 {
			wm = s.cfg.WatermarkBlocks
		}
		if r.Computed > 0 { // back from a load: no lookup
			n, ok := s.resumeLoaded(r, budget, wm)
			if !ok {
				break
			}
			*q = (*q)[1:]
			items = append(items, s.schedule(r, n))
			budget -= n
			continue
		}
		hits := s.pool.Lookup(r.hashes[:(len(r.Tokens)-1)/bs])
		s.reportHits(r, hits)
		hitTok := len(hits) * bs
		if s.cfg.PrefixStats == StatsLookupAll || (s.cfg.PrefixStats == StatsLookup && r.Preemptions == 0) {
			s.countQuery(r, hitTok)
		}
		ext, ok := s.hostLookup(r, len(hits))
		if !ok {
			*q = (*q)[1:]
			skipWait = append(skipWait, r)
			continue
		}
		n := min(len(r.Tokens)-hitTok, budget)
		reserve := 0
		if ext > 0 {
			n, reserve = ext, s.inflightReserve()
		}
		if !s.allocReserve(r, n, hits, s.cfg.ReserveFullISL, wm, reserve) {
			break
		}
		if s.cfg.PrefixStats == StatsAdmission && r.Preemptions == 0 {
			s.countQuery(r, hitTok)
		}
		s.countExternal(r, hitTok, ext)
		*q = (*q)[1:]
		r.numCached = len(hits)
		if r.CachedTokens < 0 {
			r.CachedTokens = hitTok + ext
		}
		if ext > 0 {
			r.Computed = hitTok + ext
			s.startLoad(r, len(hits), ext/bs)
			skipHold = append(skipHold, r)
			continue
		}
		s.running = append(s.running, r)
		r.Computed = hitTok
		items = append(items, s.schedule(r, n))
		budget -= n
	}
	s.holding = append(skipHold, s.holding...)
	s.waiting = append(skipWait, s.waiting...)
	return items
}

// resumeLoaded schedules a request back from a load (its tokens beyond the
// loaded ones, within budget) and runs it; false when its blocks do not fit.
func (s *Scheduler) resumeLoaded(r *Seq, budget, watermark int) (int, bool) {
	n := min(len(r.Tokens)-r.Computed, budget)
	if !s.alloc(r, n, nil, s.cfg.ReserveFullISL, watermark) {
		return 0, false
	}
	s.running = append(s.running, r)
	return n, true
}

// countExternal counts a first admission's lookup in the host tier: the
// tokens the GPU cache missed and those the tier had (ext).
func (s *Scheduler) countExternal(r *Seq, hitTok, ext int) {
	if r.Preemptions == 0 && len(r.Tokens) != hitTok {
		s.Counters.ExternalQueries += int64(len(r.Tokens) - hitTok)
		s.Counters.ExternalHits += int64(ext)
	}
}

// planStores is the connector's build_connector_meta: the scheduled
// requests offer their computed prompt blocks for storing, then the
// requests finished since the last step offer theirs and touch what they
// used.
func (s *Scheduler) planStores(b Batch) {
	h := s.host
	bs := s.cfg.BlockSize
	for _, it := range b.Items {
		q := it.Seq
		s.offerStores(q, min(q.Computed, q.NumPrompt)/bs)
	}
	for _, q := range h.finished {
		s.offerStores(q, min(q.Computed, q.NumPrompt)/bs)
		if hs := q.host; hs != nil {
			for i := len(hs.seen) - 1; i >= 0; i-- {
				if hs.seen[i] {
					if c := h.pool.chunks[q.hashes[i]]; c != nil {
						h.pool.touch(c)
					}
				}
			}
			hs.seen = nil
		}
	}
	h.finished = h.finished[:0]
}

// offerStores is prepare_store for blocks [nextStored, limit) of q: blocks
// not in host memory are stored (evicting the least recently used if the
// pool is full; if it cannot, nothing is stored and the offer is repeated
// next step); blocks already there and ready count as reused.
func (s *Scheduler) offerStores(q *Seq, limit int) {
	h, hs := s.host, s.hostOf(q)
	limit = min(limit, len(q.hashes))
	if limit <= hs.nextStored {
		return
	}
	var store []int
	for i := hs.nextStored; i < limit; i++ {
		c := h.pool.chunks[q.hashes[i]]
		switch {
		case c == nil:
			store = append(store, i)
			hs.see(i)
		case c.readyAt <= h.now:
			hs.see(i)
		}
	}
	if len(store) == 0 {
		hs.nextStored = limit
		return
	}
	if need := len(store) - (h.pool.cap - len(h.pool.chunks)); need > 0 {
		protected := make(map[uint64]bool, limit-hs.nextStored)
		for i := hs.nextStored; i < limit; i++ {
			protected[q.hashes[i]] = true
		}
		if !h.pool.evict(need, protected, h.now) {
			s.Counters.HostAllocFailures++
			return
		}
	}
	j := &transfer{seq: q, done: math.Inf(1)}
	for _, i := range store {
		c := h.pool.insert(q.hashes[i])
		c.idx = i
		j.chunks = append(j.chunks, c)
	}
	h.untimed = append(h.untimed, j)
	hs.nextStored = limit
}
