package place

import "testing"

// TestTruthHomesWhatTheTableDoesNotKnow: a placer that never saw a
// conversation (a restarted or second picker) sends its next turn where the
// engines say its prefix is, and keeps it there.
func TestTruthHomesWhatTheTableDoesNotKnow(t *testing.T) {
	for _, policy := range []string{PolicySticky, PolicyAdaptive} {
		p, _ := testPlacer(4, PlacerConfig{Config: Config{Policy: policy}})
		truth := []Resident{{Rank: 0, Tokens: 0}, {Rank: 1, Tokens: 0}, {Rank: 2, Tokens: 4096}, {Rank: 3, Tokens: 512}}
		pl := p.Decide(Request{Key: "a", Resident: truth})
		if pl.Rank != 2 || pl.Reason != ReasonSticky || !pl.Adopted || pl.PrefixOn != 2 {
			t.Fatalf("%s: first turn seen, engines hold it on 2: %+v", policy, pl)
		}
		p.End(&pl, true, Report{}, -1)
		if pl := p.Decide(Request{Key: "a"}); pl.Rank != 2 || pl.Reason != ReasonSticky || pl.Adopted {
			t.Fatalf("%s: without truth the table now knows its home: %+v", policy, pl)
		}
	}
}

// TestTruthOverridesAStaleHome: another picker moved the conversation (the
// engines hold more of it elsewhere): this one follows, so both agree.
func TestTruthOverridesAStaleHome(t *testing.T) {
	p, _ := testPlacer(3, PlacerConfig{})
	pl := p.Decide(Request{Key: "a"})
	p.End(&pl, true, Report{}, -1)
	home := pl.Rank
	other := (home + 1) % 3
	truth := []Resident{{Rank: home, Tokens: 1024}, {Rank: other, Tokens: 2048}}
	pl = p.Decide(Request{Key: "a", Resident: truth})
	if pl.Rank != other || pl.Reason != ReasonSticky || !pl.Adopted {
		t.Fatalf("engines hold more on %d than on home %d: %+v", other, home, pl)
	}
	p.End(&pl, true, Report{}, -1)
	if pl := p.Decide(Request{Key: "a"}); pl.Rank != other {
		t.Fatalf("the table follows the truth's home: %+v, want %d", pl, other)
	}
	// Equal residency keeps the home (no flapping between copies).
	truth = []Resident{{Rank: home, Tokens: 2048}, {Rank: other, Tokens: 2048}}
	if pl := p.Decide(Request{Key: "a", Resident: truth}); pl.Rank != other || pl.Adopted {
		t.Fatalf("a tie keeps the home: %+v", pl)
	}
}

// TestTruthSaysGone: where the estimate believes a prefix resident and the
// engine says it was evicted, the view has it nowhere (free to move), and
// nothing resident anywhere leaves a new conversation to the load rule.
func TestTruthSaysGone(t *testing.T) {
	sv := SessionView{Key: "a", Known: true, Home: 1, ResidentOn: 1}
	if applyTruth(&sv, []Resident{{Rank: 0}, {Rank: 1}}) >= 0 || sv.ResidentOn != -1 || sv.Home != 1 {
		t.Fatalf("evicted at home: %+v, want resident nowhere, home kept", sv)
	}
	sv = SessionView{Key: "b", ResidentOn: -1}
	if applyTruth(&sv, []Resident{{Rank: 0}, {Rank: 1}}) >= 0 || sv.Known {
		t.Fatalf("nothing anywhere: %+v, want a new conversation", sv)
	}
	sv = SessionView{Key: "c", ResidentOn: -1, Pinned: true, Pin: 0}
	if applyTruth(&sv, []Resident{{Rank: 1, Tokens: 99}}) >= 0 || sv.Known {
		t.Fatalf("a pin wins over the truth: %+v", sv)
	}
}
