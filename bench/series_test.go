package bench

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// carryConfig is a series whose sessions (6 turns of ~60 ms) outlast a stage.
func carryConfig(url string, stages ...int) Config {
	cfg := smallConfig(url, stages...)
	cfg.Carry = true
	cfg.Turns = 5
	cfg.Stage = 300 * time.Millisecond
	return cfg
}

func TestCarrySessionsSpanStages(t *testing.T) {
	f, srv := newFake(t, false)
	f.between = 10 * time.Millisecond
	res := runBench(t, carryConfig(srv.URL, 2, 4), false)
	if len(res.Stages) != 2 || res.Stages[0].Sessions != 2 || res.Stages[1].Sessions != 4 {
		t.Fatalf("stages %+v, want 2 then 4 sessions", res.Stages)
	}
	stagesOf := map[string]map[int]bool{} // session id -> stage concurrencies it has turns in
	for _, tr := range res.Turns {
		if tr.Error != "" {
			t.Errorf("turn failed: %s", tr.Error)
		}
		if stagesOf[tr.SessionID] == nil {
			stagesOf[tr.SessionID] = map[int]bool{}
		}
		stagesOf[tr.SessionID][tr.Sessions] = true
	}
	carried := 0
	for _, st := range stagesOf {
		if st[2] && st[4] {
			carried++
		}
	}
	if carried == 0 {
		t.Errorf("no session has turns in both stages: sessions did not carry over")
	}
	// Every streamed token is in exactly one turn record, and each summary
	// counts exactly its stage's in-window turns.
	all := 0
	in := map[int]int{}
	for _, tr := range res.Turns {
		all += tr.OutputTokens
		if tr.InStage {
			in[tr.Sessions] += tr.OutputTokens
		}
	}
	f.mu.Lock()
	sent, broken := f.sent, f.broken
	f.mu.Unlock()
	if all != sent || broken != 0 {
		t.Errorf("turn records hold %d output tokens, the server sent %d; %d broken follow-ups", all, sent, broken)
	}
	for _, s := range res.Stages {
		if s.OutputTokens != in[s.Sessions] || s.Turns == 0 {
			t.Errorf("stage %d: summary %d output tokens over %d turns, in-window turns %d", s.Sessions, s.OutputTokens, s.Turns, in[s.Sessions])
		}
	}
}

func TestCarryShrinkRetiresSessions(t *testing.T) {
	f, srv := newFake(t, false)
	f.between = 5 * time.Millisecond
	res := runBench(t, carryConfig(srv.URL, 3, 1), false)
	// Turns started after the second window opened come from one worker:
	// they never overlap in time.
	type span struct{ from, to float64 }
	var spans []span
	for _, tr := range res.Turns {
		if tr.Sessions == 1 && tr.StartS > 0.05 {
			spans = append(spans, span{tr.StartS, tr.StartS + tr.DurationS})
		}
	}
	if len(spans) < 2 {
		t.Fatalf("%d turns started in the 1-session stage, want several", len(spans))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	for i := 1; i < len(spans); i++ {
		if spans[i].from < spans[i-1].to {
			t.Errorf("turns at %.3f-%.3f and %.3f-%.3f overlap: more than one session after shrinking to 1",
				spans[i-1].from, spans[i-1].to, spans[i].from, spans[i].to)
		}
	}
}

func TestCarryABResetsOncePerVariant(t *testing.T) {
	f, srv := newFake(t, true)
	cfg := carryConfig(srv.URL, 1, 2)
	cfg.Variants = []string{"off", "sticky"}
	cfg.ResetCache = true
	res := runBench(t, cfg, true)
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff([]string{"off", "sticky", "sticky"}, f.policySet); diff != "" {
		t.Errorf("policy switches (-want +got):\n%s", diff)
	}
	if f.resets != 2 {
		t.Errorf("%d cache resets, want one per variant (2)", f.resets)
	}
	var got []string
	for _, s := range res.Stages {
		got = append(got, s.Variant)
	}
	if diff := cmp.Diff([]string{"off", "off", "sticky", "sticky"}, got); diff != "" {
		t.Errorf("stage variants (-want +got):\n%s", diff)
	}
	if !res.Config.Carry {
		t.Errorf("results do not record carry")
	}
}

func TestGroupSteps(t *testing.T) {
	steps := plan([]int{4, 8}, []string{"off", "sticky"}, false)
	want := [][]step{{{4, "off"}, {8, "off"}}, {{4, "sticky"}, {8, "sticky"}}}
	if diff := cmp.Diff(want, groupSteps(steps, true)); diff != "" {
		t.Errorf("carry (-want +got):\n%s", diff)
	}
	if got := groupSteps(steps, false); len(got) != 4 {
		t.Errorf("without carry: %d groups, want one per step (4)", len(got))
	}
}

func TestCarryIgnoredWithAlternate(t *testing.T) {
	f, srv := newFake(t, true)
	cfg := carryConfig(srv.URL, 1, 2)
	cfg.Variants = []string{"off", "sticky"}
	cfg.Alternate = true
	cfg.ResetCache = true
	res := runBench(t, cfg, true)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resets != 4 || len(res.Stages) != 4 || res.Config.Carry {
		t.Errorf("alternate with carry: %d resets, %d stage runs, carry recorded %v; want 4 fresh stage runs",
			f.resets, len(res.Stages), res.Config.Carry)
	}
}
