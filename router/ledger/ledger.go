// Package ledger keeps the engines' truth about their prefix caches: per
// engine, which KV blocks it holds and which conversation each chain of
// blocks belongs to, learnt from the engine's own KV-cache events (vLLM's
// BlockStored, BlockRemoved and AllBlocksCleared) rather than guessed from
// token counts.
//
// The warden sends every request with its conversation's label (the
// X-Session-ID header, Label); vLLM copies it into the BlockStored events
// the request causes. A conversation's blocks on an engine form a chain
// (each block's hash covers its parent's), so the ledger keeps, per
// conversation, the chain's hashes in order, and per block only whether
// the engine still holds it (in which tier) and which conversations' chains
// pass through it. "How much of this conversation is resident here" is then
// the number of leading blocks of its chain the engine still holds, times
// the block size: no tokenizer, no reproduction of vLLM's hash.
//
// A request that reuses cached blocks reports only what it newly stored,
// with the parent it extends; a full report (the request asks vLLM for
// kv_cache_report_mode "full") re-reports the whole prefix from the start
// of the chain. The ledger asks for one (NeedsReport) where it cannot
// place a conversation's chain: a conversation new to this engine's
// ledger, after a gap or a restart of the engine's events, or after a
// partial report whose parent it does not know.
//
// Memory: the block map holds only blocks the engine holds now (bounded by
// its KV capacity and host tier); a conversation costs its chain (8 bytes
// a block) while any of it is resident and a few words after; conversations
// are bounded per engine (least recently used beyond MaxSessions).
//
// An Engine is safe for concurrent use: events are applied on the
// subscriber's goroutine, queries come from placement.
package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/lmwarden/warden/internal/ilist"
)

// Label is the session id the warden sends to the engines for a placement
// key: an opaque, stable hash (a client's session id may be a secret; the
// engines publish the label to anyone who subscribes).
func Label(key string) string {
	if key == "" {
		return ""
	}
	h := sha256.Sum256([]byte("warden-session\x00" + key))
	return "w" + hex.EncodeToString(h[:12])
}

// Media of a block, as vLLM names them in events ("" is the main cache).
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// tier bits of a block.
const (
	tierMain uint8 = 1 << iota // GPU (vLLM's main cache, "GPU" on the CPU build too)
	tierHost                   // CPU: vLLM's own offloading tier
	tierOther
)

func tierOf(medium string) uint8 {
	switch medium {
	case "", MediumGPU:
		return tierMain
	case MediumCPU:
		return tierHost
	}
	return tierOther
}

// DefaultMaxSessions bounds the conversations an Engine remembers.
const DefaultMaxSessions = 100_000

// DefaultBlockSize is assumed until an event says the engine's.
const DefaultBlockSize = 16

// Engine is one engine's part of the ledger (one replica, or one engine of
// a data-parallel server).
type Engine struct {
	mu        sync.Mutex
	blocks    map[uint64]*block
	sess      map[string]*sess
	lru       ilist.List[sess] // most recently stored or asked first
	max       int
	blockSize int
	peak      int       // the block map's largest size since it was last rebuilt
	shared    int       // Shared's last answer, in tokens
	sharedAt  time.Time // when it was computed (zero: never)
	epoch     uint64    // bumped by a clear or a reset: what was resident before is gone
	clock     func() time.Time

	// live: events are known to flow (the subscriber caught up and no gap
	// is pending); placement trusts the ledger only then.
	live    bool
	stats   Stats
	lastEvt time.Time
}

// Stats are an Engine's counters, for the status and /metrics.
type Stats struct {
	Batches, Stored, Removed, Cleared, Gaps, Resets uint64
	Forgotten                                       uint64 // conversations dropped by the bound
	Labelled                                        uint64 // stores that named a conversation
	Blocks, HostBlocks                              int    // held now: main cache, host tier
	Sessions                                        int
	ChainBlocks                                     int // hashes kept in chains (memory)
}

type block struct {
	tiers  uint8
	owners []owner // conversations whose chain passes through it (stale entries pruned lazily)
}

type owner struct {
	s   *sess
	idx int32
}

func (o owner) valid(h uint64) bool {
	return o.s.alive && int(o.idx) < len(o.s.chain) && o.s.chain[o.idx] == h
}

type sess struct {
	label   string
	chain   []uint64
	gone    int    // blocks of a chain freed when its first block was evicted (nothing of it is reusable)
	r       int    // leading chain blocks known resident (a lower bound, extended on query)
	noBase  bool   // the chain's start is not known (a partial report of an unknown parent)
	lost    bool   // the engine cleared or restarted since the chain was learnt
	evicted uint64 // removals that cut this conversation's resident prefix
	alive   bool
	onLRU   ilist.Link[sess]
}

// NewEngine is an empty ledger for one engine; max bounds its
// conversations (0: DefaultMaxSessions); clock nil = time.Now.
func NewEngine(max int, clock func() time.Time) *Engine {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if clock == nil {
		clock = time.Now
	}
	return &Engine{blocks: map[uint64]*block{}, sess: map[string]*sess{}, max: max, blockSize: DefaultBlockSize,
		clock: clock, lru: ilist.New(func(s *sess) *ilist.Link[sess] { return &s.onLRU })}
}

// Store applies a BlockStored event: hashes (in chain order) extend parent
// (hasParent false: they start a chain), in medium, for the conversation
// label ("" = unlabelled: only the blocks are recorded).
func (e *Engine) Store(label string, hashes []uint64, parent uint64, hasParent bool, medium string, blockSize int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Stored++
	e.lastEvt = e.clock()
	if blockSize > 0 {
		e.blockSize = blockSize
	}
	bit := tierOf(medium)
	for _, h := range hashes {
		b := e.blocks[h]
		if b == nil {
			b = &block{}
			e.blocks[h] = b
		}
		b.tiers |= bit
	}
	if label == "" || bit != tierMain || len(hashes) == 0 {
		return // a host-tier copy or an unlabelled store changes no chain
	}
	e.stats.Labelled++
	s := e.session(label)
	start := e.extend(s, parent, hasParent)
	s.chain = append(s.chain, hashes...)
	for i := start; i < len(s.chain); i++ {
		e.own(s.chain[i], s, i)
	}
	s.r = min(s.r, start)
}

// extend cuts s's chain to end at parent and returns where the new hashes
// go; a parent outside s's chain borrows the prefix of another
// conversation's chain through it (a shared system prompt this one reused
// without a full report), and an unknown one leaves s without a base.
func (e *Engine) extend(s *sess, parent uint64, hasParent bool) int {
	s.lost, s.gone = false, 0
	if !hasParent {
		s.chain, s.noBase = s.chain[:0], false
		return 0
	}
	if n := len(s.chain); n > 0 && s.chain[n-1] == parent {
		return n
	}
	b := e.blocks[parent]
	if b != nil {
		for _, o := range b.owners {
			if o.s == s && o.valid(parent) {
				s.chain = s.chain[:o.idx+1]
				return len(s.chain)
			}
		}
		for _, o := range b.owners {
			if o.valid(parent) && !o.s.noBase {
				s.chain = append(s.chain[:0], o.s.chain[:o.idx+1]...)
				s.noBase = false
				return 0
			}
		}
	}
	s.chain, s.noBase = s.chain[:0], true
	return 0
}

// own records that s's chain passes through h at idx (pruning stale
// entries of h as it goes).
func (e *Engine) own(h uint64, s *sess, idx int) {
	b := e.blocks[h]
	if b == nil {
		return
	}
	kept := b.owners[:0]
	for _, o := range b.owners {
		if o.valid(h) && o.s != s {
			kept = append(kept, o)
		}
	}
	b.owners = append(kept, owner{s, int32(idx)})
}

// Remove applies a BlockRemoved event: the blocks are gone from medium's
// tier; a block gone from every tier cuts the resident prefix of each
// conversation whose chain passes through it. (vLLM can report a hash
// removed while another copy of it survives; the next full report of a
// conversation puts it back.)
func (e *Engine) Remove(hashes []uint64, medium string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Removed++
	e.lastEvt = e.clock()
	bit := tierOf(medium)
	for _, h := range hashes {
		b := e.blocks[h]
		if b == nil {
			continue
		}
		b.tiers &^= bit
		if b.tiers != 0 {
			continue
		}
		for _, o := range b.owners {
			if !o.valid(h) {
				continue
			}
			s := o.s
			s.r = min(s.r, int(o.idx))
			s.evicted++
			if o.idx == 0 { // nothing of the chain is reusable: keep its length only
				s.gone, s.chain = len(s.chain), nil
			}
		}
		delete(e.blocks, h)
	}
	e.shrink()
}

// shrink rebuilds the block map after a wave of evictions (Go maps keep
// their peak size).
func (e *Engine) shrink() {
	n := len(e.blocks)
	if n > e.peak {
		e.peak = n
	}
	if e.peak < 4096 || n > e.peak/4 {
		return
	}
	m := make(map[uint64]*block, n)
	for h, b := range e.blocks {
		m[h] = b
	}
	e.blocks, e.peak = m, n
}

// Clear applies AllBlocksCleared: nothing is resident any more. The
// conversations' chains are kept (the same tokens hash the same in the
// same engine process), so a conversation that comes back finds its chain
// and the blocks its next turn stores.
func (e *Engine) Clear() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Cleared++
	e.lastEvt = e.clock()
	e.blocks, e.peak = map[uint64]*block{}, 0
	e.epoch++
	for s := e.lru.Front(); s != nil; s = e.lru.Next(s) {
		s.r, s.lost = 0, true
	}
}

// Reset forgets every block and chain: the engine restarted (a new
// process hashes anew), or a gap in its events could not be healed. The
// conversations stay known as lost here (a miss on one is the restart's),
// and each one's next request here asks for a full report. live says
// whether events flow on (a gap: yes; the publisher gone: no).
func (e *Engine) Reset(gap, live bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if gap {
		e.stats.Gaps++
	}
	e.stats.Resets++
	e.blocks, e.peak = map[uint64]*block{}, 0
	for s := e.lru.Front(); s != nil; s = e.lru.Next(s) {
		s.chain, s.gone, s.r, s.noBase, s.lost = nil, 0, 0, false, true
	}
	e.epoch++
	e.live = live
}

// SetLive says whether events flow (the subscriber caught up: true; it
// lost the publisher: false).
func (e *Engine) SetLive(on bool) {
	e.mu.Lock()
	e.live = on
	e.mu.Unlock()
}

// Live reports whether the engine's events flow, so that its part of the
// ledger can be trusted.
func (e *Engine) Live() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.live
}

// Batch counts one applied event batch.
func (e *Engine) Batch() {
	e.mu.Lock()
	e.stats.Batches++
	e.mu.Unlock()
}

// session returns label's entry, created or moved to the front.
func (e *Engine) session(label string) *sess {
	s := e.sess[label]
	if s == nil {
		s = &sess{label: label, alive: true}
		e.sess[label] = s
		e.lru.PushFront(s)
		for e.lru.Len() > e.max {
			old := e.lru.Back()
			e.lru.Remove(old)
			delete(e.sess, old.label)
			old.alive, old.chain = false, nil
			e.stats.Forgotten++
		}
		return s
	}
	e.lru.MoveToFront(s)
	return s
}

// Residency is what the ledger says of one conversation on one engine.
type Residency struct {
	// Known: the engine's events flow and the conversation's chain here is
	// known from its start (otherwise Tokens means nothing).
	Known bool
	// Tokens of the conversation's prefix the engine holds (leading blocks
	// of its chain in any tier, times the block size); Chain the tokens of
	// the chain the ledger has seen (what a turn here could find at most).
	Tokens, Chain int
	// Lost: the engine cleared its cache or restarted since the chain was
	// learnt. Evicted counts removals that cut the resident prefix so far
	// (compare two readings to see an eviction in between).
	Lost    bool
	Evicted uint64
}

// Resident reads the conversation label's residency on this engine; a
// conversation the engine never stored for reads Known with no chain.
func (e *Engine) Resident(label string) Residency {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sess[label]
	if !e.live || label == "" {
		return Residency{}
	}
	if s == nil {
		return Residency{Known: true}
	}
	if s.noBase {
		return Residency{Evicted: s.evicted}
	}
	for s.r < len(s.chain) && e.blocks[s.chain[s.r]] != nil {
		s.r++
	}
	return Residency{Known: true, Tokens: s.r * e.blockSize, Chain: (len(s.chain) + s.gone) * e.blockSize,
		Lost: s.lost, Evicted: s.evicted}
}

// NeedsReport says whether a request of label's conversation here should
// ask for a full report: the ledger cannot place its chain (new here,
// forgotten after a reset, or without a base).
func (e *Engine) NeedsReport(label string) bool {
	if label == "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sess[label]
	return s == nil || s.noBase || len(s.chain) == 0
}

// Shared is the tokens of the longest prefix this engine holds that at
// least two conversations' chains share (the system prompt and tools
// every agent of a kind sends), read from the most recently stored
// conversation's chain.
func (e *Engine) Shared() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.live {
		return 0
	}
	if now := e.clock(); e.sharedAt.IsZero() || now.Sub(e.sharedAt) >= sharedEvery {
		e.shared, e.sharedAt = e.sharedPrefix(), now
	}
	return e.shared
}

// sharedEvery bounds how often Shared walks the chains (placement asks on
// every request; the system prompt's length changes rarely).
const sharedEvery = 100 * time.Millisecond

// sharedPrefix is Shared's walk. The caller holds e.mu.
func (e *Engine) sharedPrefix() int {
	best := 0
	n := 0
	for s := e.lru.Front(); s != nil && n < 4; s = e.lru.Next(s) {
		n++
		k := 0
		for k < len(s.chain) {
			b := e.blocks[s.chain[k]]
			if b == nil || !sharedBy2(b, s.chain[k]) {
				break
			}
			k++
		}
		best = max(best, k)
	}
	return best * e.blockSize
}

func sharedBy2(b *block, h uint64) bool {
	var first *sess
	for _, o := range b.owners {
		if !o.valid(h) {
			continue
		}
		if first == nil {
			first = o.s
		} else if o.s != first {
			return true
		}
	}
	return false
}

// BlockSize is the engine's block size in tokens (DefaultBlockSize until
// an event says).
func (e *Engine) BlockSize() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.blockSize
}

// Stats reads the engine's counters and sizes.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Sessions = len(e.sess)
	for _, b := range e.blocks {
		if b.tiers&tierMain != 0 {
			st.Blocks++
		}
		if b.tiers&tierHost != 0 {
			st.HostBlocks++
		}
	}
	for s := e.lru.Front(); s != nil; s = e.lru.Next(s) {
		st.ChainBlocks += len(s.chain)
	}
	return st
}

// Stores reads how many stores the engine reported and how many of them
// named a conversation, without walking the blocks (Stats does).
func (e *Engine) Stores() (stored, labelled uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats.Stored, e.stats.Labelled
}

// LastEvent is when the last event was applied (zero: none yet).
func (e *Engine) LastEvent() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastEvt
}
