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
	// Equal residency keeps the home where it already is the replica
	// every picker breaks the tie to (no flapping between copies).
	truth = []Resident{{Rank: home, Tokens: 2048, Key: "http://b"}, {Rank: other, Tokens: 2048, Key: "http://a"}}
	if pl := p.Decide(Request{Key: "a", Resident: truth}); pl.Rank != other || pl.Adopted {
		t.Fatalf("a tie keeps the home the tie goes to: %+v", pl)
	}
}

// TestTruthBreaksTiesAlikeOnEveryPicker: two pickers each placed a new
// conversation's first turns by load before any event arrived, on two
// replicas, so both engines hold as much of it; from the next turn on
// both pickers home it on the same one (the smaller replica key), whatever
// each one's table said.
func TestTruthBreaksTiesAlikeOnEveryPicker(t *testing.T) {
	truth := []Resident{{Rank: 0, Tokens: 1024, Key: "http://10.0.0.2:8000"}, {Rank: 1, Tokens: 1024, Key: "http://10.0.0.1:8000"}}
	for home := range 2 {
		sv := SessionView{Key: "a", Known: true, Home: home, ResidentOn: home}
		applyTruth(&sv, truth)
		if sv.Home != 1 {
			t.Errorf("a picker that homed it on %d: home %d after the truth, want 1 (the smaller key)", home, sv.Home)
		}
	}
	sv := SessionView{Key: "a", ResidentOn: -1}
	if applyTruth(&sv, truth) != 1 || !sv.Known || sv.Home != 1 {
		t.Errorf("a picker that never saw it: %+v, want homed on 1", sv)
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
