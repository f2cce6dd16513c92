package place

// Resident is what the engines' own KV-cache events say of a request's
// conversation on one replica (router/ledger): the tokens of its prefix
// the engine holds now. A data plane's core gives one per replica whose
// events flow (Request.Resident); replicas without events are left to
// Memory's estimate.
type Resident struct {
	Rank   int
	Tokens int
}

// applyTruth corrects the session view with the engines' truth:
//   - where the prefix is: the replica holding most of it (none when no
//     engine holds any: the conversation is free to move at no cost), over
//     the estimate for the replicas the truth covers;
//   - its home: a conversation the table does not know (a restarted
//     picker, another picker placed its last turn) or whose home holds
//     less of it than another replica does (another picker moved it, or
//     a spill left its newest prefix there) is homed where its prefix is,
//     so that every picker listening to the same engines agrees.
//
// It returns the rank the truth homed it on (-1 when it changed nothing).
func applyTruth(sv *SessionView, truth []Resident) int {
	if len(truth) == 0 || sv.Key == "" || sv.Pinned {
		return -1
	}
	best, bestTok := -1, 0
	for _, t := range truth {
		if t.Tokens > bestTok {
			best, bestTok = t.Rank, t.Tokens
		}
	}
	if sv.ResidentOn >= 0 {
		for _, t := range truth {
			if t.Rank == sv.ResidentOn && t.Tokens == 0 {
				sv.ResidentOn = -1 // the estimate believed it there; the engine says gone
			}
		}
	}
	if best < 0 {
		return -1
	}
	if sv.ResidentOn < 0 || tokensOn(truth, sv.ResidentOn) < bestTok {
		sv.ResidentOn = best
	}
	if !sv.Known || (sv.Home != best && tokensOn(truth, sv.Home) < bestTok) {
		sv.Known, sv.Home = true, best
		return best
	}
	return -1
}

// tokensOn is the truth's tokens on rank (-1: the truth does not cover it).
func tokensOn(truth []Resident, rank int) int {
	for _, t := range truth {
		if t.Rank == rank {
			return t.Tokens
		}
	}
	return -1
}
