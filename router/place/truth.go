package place

// Resident is what the engines' own KV-cache events say of a request's
// conversation on one replica (router/ledger): the tokens of its prefix
// the engine holds now. A data plane's core gives one per replica whose
// events flow (Request.Resident); replicas without events are left to
// Memory's estimate.
type Resident struct {
	Rank   int
	Tokens int
	// Shared is the tokens of the prefix most conversations share on that
	// engine (the system prompt): resident on the others too, it costs
	// nothing to move.
	Shared int
	// Key is the replica's identity as every picker names it (its URL,
	// router.Replica.Key): ties between replicas holding as much go to
	// the smaller key, so that pickers with their own ranks or their own
	// homes agree. "": the rank breaks the tie.
	Key string
}

// better reports whether a holds more of the conversation than b, ties
// broken by the smaller key, then the smaller rank: an order every picker
// computes alike.
func (a Resident) better(b Resident) bool {
	if a.Tokens != b.Tokens {
		return a.Tokens > b.Tokens
	}
	if a.Key != b.Key {
		return a.Key < b.Key
	}
	return a.Rank < b.Rank
}

// applyTruth corrects the session view with the engines' truth:
//   - where the prefix is: a replica the estimate believes holds it but
//     whose engine holds nothing of it is no longer believed (the
//     conversation is free to move at no cost); where both agree, the
//     engine's own count of what a move would compute again replaces the
//     estimate's footprint. The truth does not make a prefix resident that
//     the estimate believes gone: the estimate looks ahead (under overload a
//     prefix resident at placement is evicted before its turn is
//     scheduled), the engine's count is of now (measured: docs/routing.md);
//   - its home: a conversation the session table does not know (a
//     restarted picker, another picker placed its last turn) or whose
//     home is not the replica holding most of it (another picker moved it;
//     on a tie the smaller key, as every picker breaks it: two pickers that
//     each homed the conversation's first turns by load before any event
//     came, on two replicas, agree from the next turn on) is homed where
//     the engines hold most of it, so that every picker listening to the
//     same engines agrees; its prefix is then there.
//
// It returns the rank the truth homed it on (-1 when it changed no home).
func applyTruth(sv *SessionView, truth []Resident) int {
	if len(truth) == 0 || sv.Key == "" || sv.Pinned {
		return -1
	}
	top := Resident{Rank: -1}
	for _, t := range truth {
		if t.Tokens > 0 && (top.Rank < 0 || t.better(top)) {
			top = t
		}
	}
	best := top.Rank
	if sv.ResidentOn >= 0 {
		if t, ok := truthOn(truth, sv.ResidentOn); ok {
			sv.ResidentTokens, sv.ResidentKnown = max(t.Tokens-t.Shared, 0), true
			if t.Tokens == 0 {
				sv.ResidentOn, sv.ResidentKnown = -1, false // the estimate believed it there; the engine says gone
			}
		}
	}
	if best < 0 || (sv.Known && sv.Home == best) {
		return -1
	}
	sv.Known, sv.Home, sv.ResidentOn = true, best, best
	t, _ := truthOn(truth, best)
	sv.ResidentTokens, sv.ResidentKnown = max(t.Tokens-t.Shared, 0), true
	return best
}

// truthOn is the truth's entry for rank (false: the truth does not cover it).
func truthOn(truth []Resident, rank int) (Resident, bool) {
	for _, t := range truth {
		if t.Rank == rank {
			return t, true
		}
	}
	return Resident{}, false
}
