package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func blockIDs(bs []*Block) []int {
	out := []int{}
	for _, b := range bs {
		out = append(out, b.ID)
	}
	return out
}

// cachedChain allocates n blocks and caches them as a chain keyed by base.
func cachedChain(p *BlockPool, base uint64, n int) ([]*Block, []uint64) {
	bs := p.Allocate(n)
	hs := make([]uint64, n)
	for i, b := range bs {
		hs[i] = base + uint64(i)
		p.Cache(b, hs[i])
	}
	return bs, hs
}

func TestNullBlockNeverHandedOut(t *testing.T) {
	p := NewBlockPool(5)
	if p.NumFree() != 4 {
		t.Fatalf("free = %d, want 4 (num_gpu_blocks-1)", p.NumFree())
	}
	got := p.Allocate(4)
	if diff := cmp.Diff([]int{1, 2, 3, 4}, blockIDs(got)); diff != "" {
		t.Errorf("allocation order (-want +got):\n%s", diff)
	}
	if p.Allocate(1) != nil {
		t.Error("allocated past capacity")
	}
	if p.Usage() != 1 {
		t.Errorf("usage = %v, want 1", p.Usage())
	}
}

func TestEvictionOrder(t *testing.T) {
	tests := []struct {
		name      string
		take      int
		wantIDs   []int // blocks handed out, in order
		wantAHits int   // blocks of chain A still found
		wantBHits int
	}{
		{"older chain's tail goes first", 1, []int{3}, 2, 3},
		{"then the rest of the older chain, tail to head", 3, []int{3, 2, 1}, 0, 3},
		{"then the newer chain's tail", 4, []int{3, 2, 1, 6}, 0, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewBlockPool(7) // 6 usable
			a, ah := cachedChain(p, 100, 3)
			b, bh := cachedChain(p, 200, 3)
			p.Free(a) // released first: least recently used
			p.Free(b)
			got := p.Allocate(tc.take)
			if diff := cmp.Diff(tc.wantIDs, blockIDs(got)); diff != "" {
				t.Errorf("evicted (-want +got):\n%s", diff)
			}
			if n := len(p.Lookup(ah)); n != tc.wantAHits {
				t.Errorf("chain A hits = %d, want %d", n, tc.wantAHits)
			}
			if n := len(p.Lookup(bh)); n != tc.wantBHits {
				t.Errorf("chain B hits = %d, want %d", n, tc.wantBHits)
			}
		})
	}
}

func TestTouchProtectsFromEviction(t *testing.T) {
	p := NewBlockPool(5) // 4 usable
	a, ah := cachedChain(p, 100, 2)
	p.Free(a)
	hits := p.Lookup(ah)
	p.Touch(hits) // a hit pins the blocks
	if p.NumFree() != 2 {
		t.Fatalf("free = %d, want 2", p.NumFree())
	}
	got := p.Allocate(2)
	if diff := cmp.Diff([]int{3, 4}, blockIDs(got)); diff != "" {
		t.Errorf("allocated (-want +got):\n%s", diff)
	}
	if len(p.Lookup(ah)) != 2 {
		t.Error("touched chain was evicted")
	}
}

func TestFreshBlocksReturnToHead(t *testing.T) {
	p := NewBlockPool(5)
	a, _ := cachedChain(p, 100, 2) // blocks 1, 2 cached
	p.Free(a)
	fresh := p.Allocate(2) // blocks 3, 4, never cached
	p.Free(fresh)
	got := p.Allocate(1)
	if got[0].ID != 3 && got[0].ID != 4 {
		t.Errorf("allocated block %d; fresh blocks should be reused before cached ones", got[0].ID)
	}
}

func TestSharedBlockFreedOnlyAtLastRef(t *testing.T) {
	p := NewBlockPool(5)
	a, ah := cachedChain(p, 100, 2)
	p.Touch(p.Lookup(ah)) // second holder
	p.Free(a)
	if p.NumFree() != 2 {
		t.Errorf("free = %d, want 2 (shared blocks stay held)", p.NumFree())
	}
}

func TestResetRefusesWhileHeld(t *testing.T) {
	p := NewBlockPool(5)
	a, ah := cachedChain(p, 100, 2)
	if p.Reset() {
		t.Error("reset succeeded while blocks are held")
	}
	p.Free(a)
	if !p.Reset() {
		t.Fatal("reset refused with every block free")
	}
	if len(p.Lookup(ah)) != 0 || p.NumCached() != 0 {
		t.Error("cache not empty after reset")
	}
}

func TestDuplicateBlocksBothCached(t *testing.T) {
	p := NewBlockPool(5)
	x := p.Allocate(1)
	y := p.Allocate(1)
	p.Cache(x[0], 42)
	p.Cache(y[0], 42)
	p.Free(x)
	p.Free(y)
	p.Allocate(3) // the two fresh blocks, then x (released first)
	if hits := p.Lookup([]uint64{42}); len(hits) != 1 || hits[0] != y[0] {
		t.Errorf("lookup after evicting one copy = %v, want the other copy", blockIDs(hits))
	}
}
