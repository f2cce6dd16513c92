package model

// KV-cache events: what vLLM 0.32 publishes with --kv-events-config, recorded by the
// scheduler's pools as they change and taken by the engine once per step (package sim
// publishes them; docs/kv-events.md). Off unless Scheduler.EnableKVEvents was called.
//
// As vLLM (v1/core/block_pool.py, distributed/kv_transfer/.../offloading/events.py):
//   - GPU BlockStored when full blocks are cached (prompt and generated tokens), one event
//     per caching call, parent = the hash before the first new block (none for block 0),
//     with the request's session id;
//   - with the request's kv_cache_report_mode "full", a BlockStored of the whole prefix hit
//     (parent none) at each prefix lookup that hits (kv_cache_manager.get_computed_blocks);
//   - GPU BlockRemoved, one event per evicted block;
//   - AllBlocksCleared when the prefix cache is reset;
//   - host tier ("CPU"): BlockStored per block when its store completes (no session id, as
//     vLLM's offloading events), BlockRemoved of the evicted blocks in one event.

// KV event kinds.
const (
	KVStored KVEventKind = iota + 1
	KVRemoved
	KVCleared
)

// KVEventKind is a KV event's type.
type KVEventKind uint8

// Media of the cache tiers.
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// KVEvent is one change of a KV-cache tier. Tokens alias the request's tokens: read them,
// never write.
type KVEvent struct {
	Kind      KVEventKind
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []uint32
	Medium    string
	Session   string
}

// kvLog collects a step's events; nil when events are off.
type kvLog struct{ events []KVEvent }

func (l *kvLog) add(ev KVEvent) {
	if l != nil {
		l.events = append(l.events, ev)
	}
}

// EnableKVEvents makes the scheduler record KV events (TakeKVEvents collects them).
func (s *Scheduler) EnableKVEvents() {
	s.kv = &kvLog{}
	s.pool.kv = s.kv
	if s.host != nil {
		s.host.pool.kv = s.kv
	}
}

// TakeKVEvents returns the events recorded since the last call, oldest first (nil when
// off or none).
func (s *Scheduler) TakeKVEvents() []KVEvent {
	if s.kv == nil || len(s.kv.events) == 0 {
		return nil
	}
	out := s.kv.events
	s.kv.events = nil
	return out
}

// stored records blocks [from, to) of q entering the GPU cache.
func (s *Scheduler) stored(q *Seq, from, to int) {
	if s.kv == nil || to <= from {
		return
	}
	bs := s.cfg.BlockSize
	ev := KVEvent{Kind: KVStored, Hashes: q.hashes[from:to:to], Tokens: q.Tokens[from*bs : to*bs : to*bs],
		Medium: MediumGPU, Session: q.Session}
	if from > 0 {
		ev.Parent, ev.HasParent = q.hashes[from-1], true
	}
	s.kv.add(ev)
}

// reportHits is the full report mode: q's prefix hit re-reported whole, parent none.
func (s *Scheduler) reportHits(q *Seq, hits []*Block) {
	if s.kv == nil || !q.ReportFull || len(hits) == 0 {
		return
	}
	n, bs := len(hits), s.cfg.BlockSize
	s.kv.add(KVEvent{Kind: KVStored, Hashes: q.hashes[:n:n], Tokens: q.Tokens[: n*bs : n*bs],
		Medium: MediumGPU, Session: q.Session})
}

// hostStored records a completed store into the host tier, one event per block.
func (s *Scheduler) hostStored(j *transfer) {
	if s.kv == nil {
		return
	}
	bs, q := s.cfg.BlockSize, j.seq
	for _, c := range j.chunks {
		i := c.idx
		ev := KVEvent{Kind: KVStored, Hashes: []uint64{c.hash}, Medium: MediumCPU}
		if (i+1)*bs <= len(q.Tokens) {
			ev.Tokens = q.Tokens[i*bs : (i+1)*bs : (i+1)*bs]
		}
		if i > 0 {
			ev.Parent, ev.HasParent = q.hashes[i-1], true
		}
		s.kv.add(ev)
	}
}
