package ledger

import (
	"fmt"
	"runtime"
	"testing"
)

// chain makes n block hashes for conversation c starting at block from.
func chain(c, from, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(c)<<32 | uint64(from+i+1)
	}
	return hs
}

func live() *Engine {
	e := NewEngine(0, nil)
	e.SetLive(true)
	return e
}

func TestResidentFollowsStoresAndRemovals(t *testing.T) {
	e := live()
	a := chain(1, 0, 10)
	e.Store("a", a[:6], 0, false, "GPU", 32) // first turn: a full chain
	if r := e.Resident("a"); !r.Known || r.Tokens != 6*32 || r.Chain != 6*32 {
		t.Fatalf("after the first turn: %+v, want 6 blocks of 32", r)
	}
	e.Store("a", a[6:], a[5], true, "GPU", 32) // second turn: only what it added
	if r := e.Resident("a"); r.Tokens != 10*32 {
		t.Fatalf("after the second turn: %+v, want 10 blocks", r)
	}
	before := e.Resident("a")
	e.Remove(a[7:], "GPU") // vLLM evicts the tail first
	r := e.Resident("a")
	if r.Tokens != 7*32 || r.Chain != 10*32 || r.Evicted <= before.Evicted {
		t.Fatalf("after evicting blocks 7..9: %+v, want 7 resident of 10 and an eviction counted", r)
	}
	e.Remove(a[2:3], "GPU") // a hole cuts the prefix there
	if r := e.Resident("a"); r.Tokens != 2*32 {
		t.Fatalf("after a hole at block 2: %+v, want 2 resident", r)
	}
	e.Store("", a[2:3], a[1], true, "GPU", 32) // another request stores the block again
	if r := e.Resident("a"); r.Tokens != 7*32 {
		t.Fatalf("after block 2 came back: %+v, want 7 resident", r)
	}
	if r := e.Resident("nobody"); !r.Known || r.Chain != 0 {
		t.Fatalf("a conversation never stored here: %+v, want known with no chain", r)
	}
}

func TestHostTierKeepsABlockResident(t *testing.T) {
	e := live()
	a := chain(1, 0, 4)
	e.Store("a", a, 0, false, "GPU", 16)
	e.Store("", a, 0, false, "CPU", 16) // offloaded copies
	e.Remove(a[2:], "GPU")
	if r := e.Resident("a"); r.Tokens != 4*16 {
		t.Fatalf("blocks gone from the GPU but kept in the host tier: %+v, want all 4 resident", r)
	}
	if st := e.Stats(); st.Blocks != 2 || st.HostBlocks != 4 {
		t.Fatalf("stats %+v, want 2 main and 4 host blocks", st)
	}
	e.Remove(a[3:], "CPU")
	if r := e.Resident("a"); r.Tokens != 3*16 {
		t.Fatalf("block 3 gone from both tiers: %+v, want 3 resident", r)
	}
}

func TestEditedHistoryCutsTheChainAtTheParent(t *testing.T) {
	e := live()
	a := chain(1, 0, 8)
	e.Store("a", a, 0, false, "GPU", 16)
	edit := chain(9, 0, 3) // the client rewrote its history after block 4
	e.Store("a", edit, a[4], true, "GPU", 16)
	if r := e.Resident("a"); r.Chain != 8*16 || r.Tokens != 8*16 {
		t.Fatalf("after an edit at block 5: %+v, want a chain of 5+3 blocks, all resident", r)
	}
	// The old tail is no longer the conversation's: removing it changes nothing.
	e.Remove(a[5:], "GPU")
	if r := e.Resident("a"); r.Tokens != 8*16 {
		t.Fatalf("the old tail evicted: %+v, want the new chain whole", r)
	}
}

func TestSharedPrefixBorrowedAndCounted(t *testing.T) {
	e := live()
	sys := chain(0, 0, 5) // a system prompt
	e.Store("a", append(append([]uint64{}, sys...), chain(1, 5, 3)...), 0, false, "GPU", 16)
	// b reused the system prompt and reported only its own blocks.
	e.Store("b", chain(2, 5, 2), sys[4], true, "GPU", 16)
	if r := e.Resident("b"); !r.Known || r.Chain != 7*16 || r.Tokens != 7*16 {
		t.Fatalf("b through a's system prompt: %+v, want 5 shared + 2 own blocks", r)
	}
	if got := e.Shared(); got != 5*16 {
		t.Fatalf("Shared() = %d, want the 5 system-prompt blocks (80)", got)
	}
	if e.NeedsReport("b") {
		t.Fatal("b's chain is known from its start: no full report needed")
	}
	// A parent the ledger never saw: the chain has no base until a full report.
	e.Store("c", chain(3, 9, 2), 12345, true, "GPU", 16)
	if r := e.Resident("c"); r.Known {
		t.Fatalf("c extends an unknown parent: %+v, want unknown", r)
	}
	if !e.NeedsReport("c") || !e.NeedsReport("new") {
		t.Fatal("an unknown base and a new conversation both need a full report")
	}
	e.Store("c", append(append([]uint64{}, sys...), chain(3, 5, 6)...), 0, false, "GPU", 16) // the full report
	if r := e.Resident("c"); !r.Known || r.Tokens != 11*16 {
		t.Fatalf("after c's full report: %+v, want 11 blocks", r)
	}
}

func TestClearAndResetMarkConversationsLost(t *testing.T) {
	e := live()
	a := chain(1, 0, 4)
	e.Store("a", a, 0, false, "GPU", 16)
	e.Clear()
	if r := e.Resident("a"); !r.Known || r.Tokens != 0 || !r.Lost || r.Chain != 4*16 {
		t.Fatalf("after a clear: %+v, want known, nothing resident, lost, the chain kept", r)
	}
	e.Store("a", a, 0, false, "GPU", 16) // the next turn stores it all again
	if r := e.Resident("a"); r.Lost || r.Tokens != 4*16 {
		t.Fatalf("stored again after the clear: %+v", r)
	}
	e.Reset(false, false) // the engine restarted and its publisher is gone
	if r := e.Resident("a"); r.Known {
		t.Fatalf("events stopped: %+v, want unknown", r)
	}
	e.SetLive(true)
	if r := e.Resident("a"); !r.Known || !r.Lost || r.Chain != 0 {
		t.Fatalf("after a restart: %+v, want known as lost with no chain", r)
	}
	if !e.NeedsReport("a") {
		t.Fatal("after a restart the conversation's next request needs a full report")
	}
}

func TestSessionsBounded(t *testing.T) {
	e := NewEngine(3, nil)
	e.SetLive(true)
	for c := range 5 {
		e.Store(fmt.Sprint(c), chain(c, 0, 2), 0, false, "GPU", 16)
	}
	st := e.Stats()
	if st.Sessions != 3 || st.Forgotten != 2 || st.ChainBlocks != 6 {
		t.Fatalf("stats %+v, want 3 conversations kept, 2 forgotten, 6 chain blocks", st)
	}
	if r := e.Resident("0"); r.Chain != 0 {
		t.Fatalf("the oldest conversation was dropped, got %+v", r)
	}
	// Its blocks are still the engine's: removing them must not touch a freed entry.
	e.Remove(chain(0, 0, 2), "GPU")
}

func TestLabelIsOpaqueAndStable(t *testing.T) {
	a, b := Label("user@example.com"), Label("user@example.com")
	if a != b || a == "" || len(a) != 25 || a == Label("other") {
		t.Fatalf("Label: %q %q", a, b)
	}
	if Label("") != "" {
		t.Fatal("no key, no label")
	}
}

func TestClassify(t *testing.T) {
	known := func(tokens, chain int) Residency { return Residency{Known: true, Tokens: tokens, Chain: chain} }
	cases := []struct {
		name string
		turn Turn
		want []Part
	}{
		{"fully cached", Turn{Prompt: 1000, Cached: 1000}, nil},
		{"first turn", Turn{Prompt: 1000, Cached: 200, First: true}, []Part{{MissNew, 800}}},
		{"follow-up, only its new input", Turn{Prompt: 1300, Cached: 992, PrevContext: 1000, BlockSize: 32,
			Before: known(992, 992), After: known(992, 992)}, []Part{{MissNew, 308}}},
		{"evicted before placement", Turn{Prompt: 1300, Cached: 320, PrevContext: 1000, BlockSize: 32,
			Before: known(320, 992), After: known(320, 992)}, []Part{{MissNew, 340}, {MissEvicted, 640}}},
		{"evicted while it waited", Turn{Prompt: 1300, Cached: 320, PrevContext: 1000, BlockSize: 32,
			Before: known(992, 992), After: Residency{Known: true, Tokens: 320, Chain: 992, Evicted: 3}},
			[]Part{{MissNew, 340}, {MissEvicted, 640}}},
		{"moved", Turn{Prompt: 1300, Cached: 96, PrevContext: 1000, BlockSize: 32, Moved: true,
			Before: known(96, 0), After: known(96, 1312)}, []Part{{MissNew, 340}, {MissMoved, 864}}},
		{"restarted", Turn{Prompt: 1300, Cached: 0, PrevContext: 1000, BlockSize: 32,
			Before: Residency{Known: true, Lost: true}}, []Part{{MissNew, 340}, {MissRestarted, 960}}},
		{"prefix changed", Turn{Prompt: 1300, Cached: 64, PrevContext: 1000, BlockSize: 32,
			Before: known(992, 992), After: known(992, 992)}, []Part{{MissNew, 340}, {MissPrefixChanged, 896}}},
		{"no events, estimate said resident", Turn{Prompt: 1300, Cached: 64, PrevContext: 1000, BlockSize: 32,
			EstimateResident: true}, []Part{{MissNew, 340}, {MissUnknown, 896}}},
		{"no events, estimate said gone", Turn{Prompt: 1300, Cached: 64, PrevContext: 1000, BlockSize: 32},
			[]Part{{MissNew, 340}, {MissEvicted, 896}}},
	}
	for _, c := range cases {
		got := Classify(c.turn)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: Classify = %v, want %v", c.name, got, c.want)
		}
		sum := 0
		for _, p := range got {
			sum += p.Tokens
		}
		if sum != max(c.turn.Prompt-c.turn.Cached, 0) {
			t.Errorf("%s: parts add up to %d, want the uncached %d", c.name, sum, c.turn.Prompt-c.turn.Cached)
		}
	}
}

// BenchmarkApply is the ledger's event processing: a store of a turn's
// new blocks and the removal of as many (a cache at capacity), per event.
func BenchmarkApply(b *testing.B) {
	e := live()
	const conv, turnBlocks = 64, 16
	next := make([]int, conv)
	b.ReportAllocs()
	for i := range b.N {
		c := i % conv
		hs := chain(c, next[c], turnBlocks)
		if next[c] == 0 {
			e.Store(fmt.Sprint(c), hs, 0, false, "GPU", 16)
		} else {
			e.Store(fmt.Sprint(c), hs, uint64(c)<<32|uint64(next[c]), true, "GPU", 16)
		}
		next[c] += turnBlocks
		if i >= conv {
			old := (i - conv) % conv
			e.Remove(chain(old, max(next[old]-2*turnBlocks, 0), turnBlocks), "GPU")
		}
	}
	b.ReportMetric(float64(b.N*2)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMemoryPerThousandConversations measures what the ledger keeps
// for 1,000 conversations of 100k tokens at vLLM's default block size
// (16): all resident, then each with its tail evicted (a chain kept, its
// first half resident), then all evicted. Run it once:
//
//	go test -run '^$' -bench MemoryPerThousand -benchtime 1x ./router/ledger/
func BenchmarkMemoryPerThousandConversations(b *testing.B) {
	for range b.N {
		measureMemory(b)
	}
}

func measureMemory(t testing.TB) {
	const conv, blocks = 1000, 100_000 / 16
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	e := live()
	for c := range conv {
		e.Store(fmt.Sprint(c), chain(c, 0, blocks), 0, false, "GPU", 16)
	}
	resident := heap() - base
	for c := range conv {
		e.Remove(chain(c, blocks/2, blocks-blocks/2), "GPU")
	}
	half := heap() - base
	for c := range conv {
		e.Remove(chain(c, 0, blocks/2), "GPU")
	}
	evicted := heap() - base
	st := e.Stats()
	mib := func(n uint64) float64 { return float64(n) / (1 << 20) }
	if b, ok := t.(*testing.B); ok {
		b.ReportMetric(mib(resident), "MiB-resident")
		b.ReportMetric(mib(half), "MiB-half-evicted")
		b.ReportMetric(mib(evicted), "MiB-evicted")
	}
	if st.Blocks != 0 || evicted >= half || half >= resident {
		t.Fatalf("eviction did not free memory: %+v, %d, %d, %d bytes", st, resident, half, evicted)
	}
	runtime.KeepAlive(e)
}
