package sim

import (
	"fmt"
	"sort"
	"testing"

	"github.com/tidwall/gjson"
)

func TestDrawnOutputLengthsFollowTheAgentTrace(t *testing.T) {
	const n = 20000
	lens := make([]int, n)
	for i := range lens {
		lens[i] = drawOutputTokens(0, Tokenize(fmt.Sprintf("prompt number %d of a coding session", i)))
	}
	if a, b := drawOutputTokens(3, Tokenize("same prompt")), drawOutputTokens(3, Tokenize("same prompt")); a != b {
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

func TestPlanStopsLikeAModel(t *testing.T) {
	s := &server{cfg: Config{}, maxLen: 65536}
	prompt := Tokenize("list the files and then run the tests")
	drawn := drawOutputTokens(0, prompt)
	num := func(n int) gjson.Result { return gjson.Parse(fmt.Sprint(n)) }
	for _, tc := range []struct {
		name   string
		max    gjson.Result
		ignore bool
		outCap int
		want   int
		reason string
	}{
		{"the drawn answer fits max_tokens: stop", num(32000), false, 0, drawn, "stop"},
		{"max_tokens below the drawn length: length", num(drawn - 1), false, 0, drawn - 1, "length"},
		{"no max_tokens (Codex): the drawn answer, within the context", gjson.Result{}, false, 0, drawn, "stop"},
		{"ignore_eos: exactly max_tokens", num(300), true, 0, 300, "length"},
		{"ignore_eos without max_tokens: to the end of the context", gjson.Result{}, true, 0, 65536 - len(prompt), "length"},
		{"--sim-output-tokens replaces the draw", num(32000), false, 24, 24, "stop"},
		{"--sim-output-tokens above max_tokens: length", num(10), false, 24, 10, "length"},
	} {
		s.cfg.OutputTokens = tc.outCap
		p, err := s.plan(prompt, tc.max, "max_tokens", tc.ignore)
		if err != nil || p.maxTokens != tc.want || p.stopReason != tc.reason {
			t.Errorf("%s: %d tokens (%s), %v; want %d (%s)", tc.name, p.maxTokens, p.stopReason, err, tc.want, tc.reason)
		}
	}
	// Never past the context left.
	long := make([]uint32, 65344)
	for i := range long {
		long[i] = uint32(i)
	}
	s.cfg.OutputTokens = 0
	if p, _ := s.plan(long, num(8000), "max_tokens", true); p.maxTokens != 192 || p.stopReason != "length" {
		t.Errorf("a 65,344-token prompt in 65,536: %d tokens (%s), want the 192 left", p.maxTokens, p.stopReason)
	}
}
