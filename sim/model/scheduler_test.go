package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHeadOfLineBlocking(t *testing.T) {
	s := newTestSched(10, 1000, 8)        // 9 usable blocks of 4 tokens
	a := NewSeq(1, tokens(1, 24), 100, 4) // 6 blocks
	b := NewSeq(2, tokens(2, 20), 100, 4) // 5 blocks: does not fit next to a
	c := NewSeq(3, tokens(3, 3), 100, 4)  // 1 block: would fit, but waits behind b
	for _, q := range []*Seq{a, b, c} {
		s.Add(q)
	}
	step(s)
	if diff := cmp.Diff([]uint64{1}, ids(s.running)); diff != "" {
		t.Errorf("running (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{2, 3}, ids(s.waiting)); diff != "" {
		t.Errorf("waiting (-want +got):\n%s", diff)
	}
}

func TestPreemptionTakesNewestAndAdmitsNoOne(t *testing.T) {
	// 7 usable blocks. Three requests of 8 tokens (2 blocks each) decode;
	// when the first crosses a block boundary it needs a 7th+ block.
	s := newTestSched(8, 1000, 8)
	a, b, c := NewSeq(1, tokens(1, 8), 10, 4), NewSeq(2, tokens(2, 8), 10, 4), NewSeq(3, tokens(3, 8), 10, 4)
	for _, q := range []*Seq{a, b, c} {
		s.Add(q)
	}
	step(s) // all three prefill (6 blocks) and sample their first token
	d := NewSeq(4, tokens(4, 3), 10, 4)
	s.Add(d)
	// a, b, c each need a 3rd block for position 8: a gets the last free
	// one, b forces c (the newest) out; d must not be admitted this step.
	bt := s.Schedule()
	if diff := cmp.Diff([]uint64{3}, ids(bt.Preempted)); diff != "" {
		t.Errorf("preempted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{1, 2}, ids(s.running)); diff != "" {
		t.Errorf("running (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{3, 4}, ids(s.waiting)); diff != "" {
		t.Errorf("waiting: preempted goes to the front, d not admitted (-want +got):\n%s", diff)
	}
	if c.Computed != 0 || c.Preemptions != 1 || len(c.Tokens) != 9 {
		t.Errorf("victim keeps its output and restarts: computed %d preemptions %d tokens %d", c.Computed, c.Preemptions, len(c.Tokens))
	}
	if s.Counters.Preemptions != 1 {
		t.Errorf("preemption counter = %d, want 1", s.Counters.Preemptions)
	}
}

func TestSeveralVictimsEarliestAtFront(t *testing.T) {
	s := newTestSched(7, 1000, 8) // 6 usable
	for i := 1; i <= 3; i++ {
		s.Add(NewSeq(uint64(i), tokens(i, 8), 10, 4))
	}
	step(s)
	// a needs a 3rd block and none is free: preempts c, then b.
	s.running[0].Tokens = append(s.running[0].Tokens, 1, 2, 3, 4)
	s.running[0].extendHashes()
	bt := s.Schedule()
	if diff := cmp.Diff([]uint64{3, 2}, ids(bt.Preempted)); diff != "" {
		t.Errorf("preempted order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{2, 3}, ids(s.waiting)); diff != "" {
		t.Errorf("waiting (-want +got):\n%s", diff)
	}
}

func TestPrefixHitCappedAtNumTokensMinusOne(t *testing.T) {
	tests := []struct {
		name     string
		prompt   int // tokens, block size 4
		wantHits int
	}{
		{"whole blocks: last block recomputed", 16, 12},
		{"partial last block", 18, 16},
		{"one token", 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSched(64, 1000, 8)
			first := NewSeq(1, tokens(1, tc.prompt), 1, 4)
			s.Add(first)
			step(s) // prefill, 1 token, finish: blocks stay cached
			second := NewSeq(2, tokens(1, tc.prompt), 1, 4)
			s.Add(second)
			step(s)
			if second.CachedTokens != tc.wantHits {
				t.Errorf("cached tokens = %d, want %d", second.CachedTokens, tc.wantHits)
			}
			c := s.Counters
			want := Counters{PrefixQueries: int64(2 * tc.prompt), PrefixHits: int64(tc.wantHits),
				PromptTokens: int64(2 * tc.prompt), GenerationTokens: 2}
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGeneratedTokensAreCached(t *testing.T) {
	s := newTestSched(64, 1000, 8)
	a := NewSeq(1, tokens(1, 6), 6, 4)
	s.Add(a)
	for !s.Idle() {
		step(s)
	}
	// a's sequence: 6 prompt + 6 output = 12 tokens, 11 computed: 2 full blocks.
	next := append(append([]uint32{}, a.Tokens...), 99, 98, 97)
	b := NewSeq(2, next, 1, 4)
	s.Add(b)
	step(s)
	if b.CachedTokens != 8 {
		t.Errorf("replayed conversation hit %d tokens, want 8 (prompt+output, block-rounded, last token never computed)", b.CachedTokens)
	}
}

func TestPrefixQueryCounting(t *testing.T) {
	// A blocked head is retried every step; how the retries count depends
	// on the version (R4.4).
	tests := []struct {
		mode        string
		wantQueries int64
	}{
		{StatsAdmission, 40 + 32},   // a, then b once at admission
		{StatsLookup, 40 + 32*3},    // b looked up in 3 steps
		{StatsLookupAll, 40 + 32*3}, // same, no preemptions here
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			s := newTestSched(16, 1000, 8, func(c *SchedConfig) { c.PrefixStats = tc.mode }) // 15 usable
			a := NewSeq(1, tokens(1, 40), 2, 4)                                              // 10 blocks (+1 while decoding)
			b := NewSeq(2, tokens(2, 32), 1, 4)                                              // 8 blocks: waits for a
			s.Add(a)
			s.Add(b)
			for !s.Idle() {
				step(s)
			}
			if s.Counters.PrefixQueries != tc.wantQueries {
				t.Errorf("queries = %d, want %d", s.Counters.PrefixQueries, tc.wantQueries)
			}
		})
	}
}

func TestFullSequenceGate(t *testing.T) {
	for _, gate := range []bool{true, false} {
		s := newTestSched(8, 8, 8, func(c *SchedConfig) { c.ReserveFullISL = gate }) // 7 usable, budget 8
		s.Add(NewSeq(1, tokens(1, 40), 1, 4))                                        // 10 blocks: never fits whole
		s.Schedule()
		admitted := s.NumRunning() == 1
		if admitted == gate {
			t.Errorf("gate %v: admitted = %v", gate, admitted)
		}
	}
}

func TestChunkedPrefillFirstTokenAfterLastChunk(t *testing.T) {
	s := newTestSched(64, 8, 8)
	q := NewSeq(1, tokens(1, 20), 3, 4)
	s.Add(q)
	var chunks []int
	var outputsAfter []int
	for !s.Idle() {
		b := step(s)
		chunks = append(chunks, b.Items[0].N)
		outputsAfter = append(outputsAfter, q.Output)
	}
	if diff := cmp.Diff([]int{8, 8, 4, 1, 1}, chunks); diff != "" {
		t.Errorf("scheduled tokens per step (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 1, 2, 3}, outputsAfter); diff != "" {
		t.Errorf("outputs after each step (-want +got):\n%s", diff)
	}
}

func TestBudgetSharedPhaseAFirst(t *testing.T) {
	// A running prefill uses the budget before a new request is admitted.
	s := newTestSched(64, 10, 8)
	a := NewSeq(1, tokens(1, 30), 1, 4)
	s.Add(a)
	step(s) // a: 10 tokens
	s.Add(NewSeq(2, tokens(2, 30), 1, 4))
	b := s.Schedule()
	got := []int{}
	for _, it := range b.Items {
		got = append(got, it.N)
	}
	if diff := cmp.Diff([]int{10}, got); diff != "" {
		t.Errorf("step items (-want +got):\n%s", diff)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	s := newTestSched(64, 1000, 2)
	for i := 1; i <= 3; i++ {
		s.Add(NewSeq(uint64(i), tokens(i, 4), 5, 4))
	}
	step(s)
	if s.NumRunning() != 2 || s.NumWaiting() != 1 {
		t.Errorf("running %d waiting %d, want 2 and 1", s.NumRunning(), s.NumWaiting())
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	s := newTestSched(16, 1000, 8)
	q := NewSeq(1, tokens(1, 20), 50, 4)
	s.Add(q)
	step(s)
	if s.Pool().NumFree() == 15 {
		t.Fatal("running request holds no blocks")
	}
	s.Abort(q)
	if s.Pool().NumFree() != 15 || !s.Idle() {
		t.Errorf("after abort: free %d idle %v", s.Pool().NumFree(), s.Idle())
	}
}

func TestPreemptedLookupsCountOnlyInLookupAll(t *testing.T) {
	counts := map[string]int64{}
	for _, mode := range []string{StatsAdmission, StatsLookup, StatsLookupAll} {
		s := newTestSched(8, 1000, 8, func(c *SchedConfig) { c.PrefixStats = mode }) // 7 usable
		a, b := NewSeq(1, tokens(1, 12), 6, 4), NewSeq(2, tokens(2, 12), 6, 4)       // 3 blocks each, 4-5 when done
		s.Add(a)
		s.Add(b)
		preempted := 0
		for !s.Idle() {
			preempted += len(step(s).Preempted)
		}
		if preempted == 0 {
			t.Fatalf("%s: no preemption; the test needs one", mode)
		}
		counts[mode] = s.Counters.PrefixQueries
	}
	if counts[StatsAdmission] != 24 || counts[StatsLookup] != 24 || counts[StatsLookupAll] <= 24 {
		t.Errorf("queries by mode %v: admission and lookup count each request once here (24), lookup-all also counts the re-lookup after preemption", counts)
	}
}
