package model

import (
	"strings"
	"testing"
)

// BenchmarkPrefixMatch measures what admission costs per prompt token:
// hashing the prompt's blocks into a chain and looking the chain up in a
// pool that caches it. Reported as ns/token.
func BenchmarkPrefixMatch(b *testing.B) {
	const n = 16384
	prompt := tokens(1, n)
	pool := NewBlockPool(n/16 + 2)
	seed := NewSeq(0, prompt, 1, 16)
	blocks := pool.Allocate(len(seed.hashes))
	for i, blk := range blocks {
		pool.Cache(blk, seed.hashes[i])
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q := NewSeq(1, prompt, 1, 16)
		if hits := pool.Lookup(q.hashes[:(n-1)/16]); len(hits) != (n-1)/16 {
			b.Fatalf("hits %d", len(hits))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/token")
}

// BenchmarkTokenize measures the tokenizer on agent-sized English text.
func BenchmarkTokenize(b *testing.B) {
	text := strings.Repeat(english+" ", 300)
	n := len(Tokenize(text))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Tokenize(text)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
}

// BenchmarkDecodeStep measures the scheduler's CPU cost of one decode step
// with 256 running sequences (no clock, no HTTP).
func BenchmarkDecodeStep(b *testing.B) {
	s := newTestSched(1<<16, 1<<20, 256, func(c *SchedConfig) { c.BlockSize = 16 })
	for i := 0; i < 256; i++ {
		s.Add(NewSeq(uint64(i), tokens(i, 1000), 1<<30, 16))
	}
	step(s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step(s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/seq-step")
}

// BenchmarkDecodeStepKVEvents is BenchmarkDecodeStep with KV events recorded and taken
// every step (what the engine hands its publisher): compare the two.
func BenchmarkDecodeStepKVEvents(b *testing.B) {
	s := newTestSched(1<<16, 1<<20, 256, func(c *SchedConfig) { c.BlockSize = 16 })
	s.EnableKVEvents()
	for i := 0; i < 256; i++ {
		s.Add(NewSeq(uint64(i), tokens(i, 1000), 1<<30, 16))
	}
	step(s)
	s.TakeKVEvents()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step(s)
		s.TakeKVEvents()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/seq-step")
}
