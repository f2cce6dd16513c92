package model

import "github.com/lmwarden/warden/internal/ilist"

// Block is one KV-cache block of blockSize tokens.
type Block struct {
	ID     int
	ref    int               // requests holding the block
	hash   uint64            // chain hash when cached
	cached bool              // hash is valid and registered in the lookup map
	free   ilist.Link[Block] // on BlockPool.free
}

// BlockPool is vLLM's block pool: a fixed set of blocks, a free queue in LRU
// order (head is taken first; cached blocks are released to the tail, tail of a
// chain first; fresh blocks go to the head, per PR #42656), and a lookup map
// from chain hash to cached blocks. Block 0 is the null block and is never
// handed out. Not safe for concurrent use: the engine goroutine owns it.
type BlockPool struct {
	blocks []Block
	free   ilist.List[Block] // the free queue: front = next to evict
	byHash map[uint64][]*Block
	kv     *kvLog // KV events (nil: off)
}

// NewBlockPool makes a pool of numBlocks blocks (numBlocks-1 usable).
func NewBlockPool(numBlocks int) *BlockPool {
	if numBlocks < 2 {
		numBlocks = 2
	}
	p := &BlockPool{blocks: make([]Block, numBlocks), byHash: map[uint64][]*Block{},
		free: ilist.New(func(b *Block) *ilist.Link[Block] { return &b.free })}
	for i := range p.blocks {
		p.blocks[i].ID = i
	}
	for i := 1; i < numBlocks; i++ { // block 0: the null block
		p.free.PushBack(&p.blocks[i])
	}
	return p
}

// NumBlocks is num_gpu_blocks, the null block included.
func (p *BlockPool) NumBlocks() int { return len(p.blocks) }

// NumFree counts blocks with ref 0, cached or not (vLLM's free count).
func (p *BlockPool) NumFree() int { return p.free.Len() }

// Usage is vLLM's kv_cache_usage: 1 - free/(num_gpu_blocks-1).
func (p *BlockPool) Usage() float64 {
	return 1 - float64(p.free.Len())/float64(len(p.blocks)-1)
}

// NumCached counts blocks that currently hold a registered hash.
func (p *BlockPool) NumCached() int {
	n := 0
	for _, bs := range p.byHash {
		n += len(bs)
	}
	return n
}

// Lookup returns the cached blocks of the longest prefix of hashes, stopping at
// the first miss. It changes nothing.
func (p *BlockPool) Lookup(hashes []uint64) []*Block {
	var hit []*Block
	for _, h := range hashes {
		bs := p.byHash[h]
		if len(bs) == 0 {
			break
		}
		hit = append(hit, bs[0])
	}
	return hit
}

// Touch takes a reference on each block, removing free ones from the queue.
func (p *BlockPool) Touch(bs []*Block) {
	for _, b := range bs {
		if b.ref == 0 {
			p.free.Remove(b) // a no-op for the null block, never free
		}
		b.ref++
	}
}

// Allocate takes n blocks from the head of the free queue, evicting their
// hashes, with ref 1. It returns nil if fewer than n are free.
func (p *BlockPool) Allocate(n int) []*Block {
	if n > p.free.Len() {
		return nil
	}
	out := make([]*Block, 0, n)
	for i := 0; i < n; i++ {
		b := p.free.Front()
		p.free.Remove(b)
		p.evict(b)
		b.ref = 1
		out = append(out, b)
	}
	return out
}

// Free drops one reference on each block, in reverse order (tail of the chain
// first). Blocks reaching ref 0 go to the free queue: cached ones to the tail
// (most recently used), fresh ones to the head (reused first).
func (p *BlockPool) Free(bs []*Block) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		b.ref--
		if b.ref > 0 {
			continue
		}
		if b.cached {
			p.free.PushBack(b)
		} else {
			p.free.PushFront(b)
		}
	}
}

// Cache registers b under hash (no dedup: an identical block computed twice
// is cached twice; lookups return the first).
func (p *BlockPool) Cache(b *Block, hash uint64) {
	if b.cached {
		return
	}
	b.hash, b.cached = hash, true
	p.byHash[hash] = append(p.byHash[hash], b)
}

// Reset drops every cached hash, like vLLM's reset_prefix_cache. It refuses
// (returns false) while any block is held by a request.
func (p *BlockPool) Reset() bool {
	if p.free.Len() != len(p.blocks)-1 {
		return false
	}
	for i := range p.blocks {
		p.blocks[i].cached = false
	}
	p.byHash = map[uint64][]*Block{}
	p.kv.add(KVEvent{Kind: KVCleared})
	return true
}

func (p *BlockPool) evict(b *Block) {
	if !b.cached {
		return
	}
	b.cached = false
	if p.kv != nil {
		p.kv.add(KVEvent{Kind: KVRemoved, Hashes: []uint64{b.hash}, Medium: MediumGPU})
	}
	bs := p.byHash[b.hash]
	for i, x := range bs {
		if x == b {
			bs = append(bs[:i], bs[i+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(p.byHash, b.hash)
	} else {
		p.byHash[b.hash] = bs
	}
}

// chainHash extends a block hash chain by one block of tokens.
func chainHash(parent uint64, toks []uint32) uint64 {
	h := parent ^ 0x51af_d7ed_558c_cd00
	for _, t := range toks {
		h = (h ^ uint64(t)) * 0x100000001b3
		h ^= h >> 29
	}
	return mix64(h)
}
