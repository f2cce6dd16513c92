package model

import (
	"encoding/binary"
	"hash/fnv"
	"math"
)

// How long the simulator's answers are when nothing forces their length.
//
// A real model stops at its end-of-sequence token; the simulator has none,
// so it draws each answer's length from the output lengths of coding
// agents' model calls: the per-step output-token quantiles of TraceLab's
// SyFI Trace Atlas (University of Washington, 2026: 140,338 Claude Code
// steps of real sessions, "token_length_distribution": p25 132, p50 252,
// p90 1,671, p99 6,571, mean 690), between which the quantile function is
// interpolated log-linearly. Most answers are a tool call or a short reply;
// one in ten runs past 1.6k tokens. The draw is deterministic: a hash of
// --sim-seed and the prompt's tokens picks the quantile, so the same
// request gets the same length on every run and every replica.
var outputQuantiles = []struct {
	p      float64
	tokens float64
}{
	{0, 8}, // the shortest answers (a bare tool call) are a handful of tokens
	{0.25, 132},
	{0.50, 252},
	{0.90, 1671},
	{0.99, 6571},
	{1, 16384}, // an end for the tail: the trace gives no maximum (2.5 x its p99)
}

// DrawOutputTokens is the length of the answer to prompt when the model
// is let stop on its own.
func DrawOutputTokens(seed uint64, prompt []uint32) int {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(b[:4], t)
		h.Write(b[:4])
	}
	u := float64(h.Sum64()>>11) / (1 << 53) // uniform in [0, 1)
	return outputQuantile(u)
}

// outputQuantile is the quantile function of outputQuantiles at u.
func outputQuantile(u float64) int {
	for i := 1; i < len(outputQuantiles); i++ {
		lo, hi := outputQuantiles[i-1], outputQuantiles[i]
		if u <= hi.p {
			f := (u - lo.p) / (hi.p - lo.p)
			return int(math.Round(math.Exp(math.Log(lo.tokens) + f*(math.Log(hi.tokens)-math.Log(lo.tokens)))))
		}
	}
	return int(outputQuantiles[len(outputQuantiles)-1].tokens)
}

// OutputTokensAt is the answer length at quantile p (0 to 1) of the drawn
// lengths, for saying what a user of the simulator should expect.
func OutputTokensAt(p float64) int { return outputQuantile(p) }
