package model

import (
	"fmt"
	"sort"
	"testing"
)

func TestDrawnOutputLengthsFollowTheAgentTrace(t *testing.T) {
	const n = 20000
	lens := make([]int, n)
	for i := range lens {
		lens[i] = DrawOutputTokens(0, Tokenize(fmt.Sprintf("prompt number %d of a coding session", i)))
	}
	if a, b := DrawOutputTokens(3, Tokenize("same prompt")), DrawOutputTokens(3, Tokenize("same prompt")); a != b {
		t.Fatalf("one prompt and seed drew %d and %d", a, b)
	}
	sort.Ints(lens)
	// TraceLab's Claude Code steps: p25 132, p50 252, p90 1,671, p99 6,571.
	for _, q := range []struct {
		p    float64
		want int
	}{{0.25, 132}, {0.50, 252}, {0.90, 1671}, {0.99, 6571}} {
		got := lens[int(q.p*n)]
		if float64(got) < 0.9*float64(q.want) || float64(got) > 1.1*float64(q.want) {
			t.Errorf("p%.0f of %d draws = %d tokens, want about %d", 100*q.p, n, got, q.want)
		}
	}
	if lens[0] < 1 || lens[n-1] > 16384 {
		t.Errorf("draws range %d..%d, want within 1..16384", lens[0], lens[n-1])
	}
}
