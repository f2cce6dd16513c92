package sim

import (
	"fmt"
	"testing"

	"github.com/lmwarden/warden/sim/model"
	"github.com/tidwall/gjson"
)

func TestPlanStopsLikeAModel(t *testing.T) {
	s := &server{cfg: Config{}, maxLen: 65536}
	prompt := model.Tokenize("list the files and then run the tests")
	drawn := model.DrawOutputTokens(0, prompt)
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
