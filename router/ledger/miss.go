package ledger

// Why a turn's prompt tokens were not found in the prefix cache: the
// reason label of warden_prefix_miss_tokens_total and the decision log's
// miss_reason.
const (
	// MissNew: tokens no engine had seen — a new conversation's prompt
	// beyond a shared prefix, the new input of a follow-up turn, and the
	// tail of the previous answer that the chat template renders anew
	// (vLLM never caches a request's last token, and an answer's text
	// re-tokenized can differ in its last block).
	MissNew = "new"
	// MissEvicted: the conversation's prefix was on the engine that served
	// the turn and was evicted before the turn was scheduled.
	MissEvicted = "evicted"
	// MissMoved: the turn was served away from its prefix (a spill, a move,
	// a failover, a balancer's pick, a pin).
	MissMoved = "moved"
	// MissRestarted: the engine restarted or its cache was cleared since
	// the conversation's prefix was stored there.
	MissRestarted = "restarted"
	// MissPrefixChanged: the engine held the conversation's prefix and the
	// turn did not reuse it: the client changed its own prefix (an edited
	// history, a compacted conversation, a changed system prompt or tools).
	MissPrefixChanged = "prefix_changed"
	// MissUnknown: no engine truth and no estimate can say (a follow-up
	// turn served on its home without KV events).
	MissUnknown = "unknown"
)

// MissReasons lists every reason, for metrics initialised at zero.
var MissReasons = []string{MissNew, MissEvicted, MissMoved, MissRestarted, MissPrefixChanged, MissUnknown}

// Turn is what is known of one finished turn for Classify.
type Turn struct {
	Prompt, Cached int // the engine's usage report
	// First: the conversation's first turn the warden has seen.
	First bool
	// PrevContext: the previous turn's prompt plus completion tokens (0
	// unknown): what this turn could find cached at most, beyond its new
	// input.
	PrevContext int
	BlockSize   int
	// Moved: the placement served the turn away from where its prefix was
	// believed to be (not its home, or the ledger knows no chain of it
	// there).
	Moved bool
	// Before and After are the ledger's reading on the serving engine at
	// placement and at the end (Known false without events).
	Before, After Residency
	// EstimateResident: without events, the estimate believed the prefix
	// resident where the turn went.
	EstimateResident bool
}

// Part is a share of a turn's uncached prompt tokens with its reason.
type Part struct {
	Reason string
	Tokens int
}

// Classify splits a turn's uncached prompt tokens (Prompt - Cached) into
// at most two parts: what no engine could have had (MissNew) and, for
// the rest, why the cache did not have it.
func Classify(t Turn) []Part {
	uncached := t.Prompt - t.Cached
	if uncached <= 0 {
		return nil
	}
	if t.First || t.PrevContext <= 0 {
		return []Part{{MissNew, uncached}}
	}
	bs := t.BlockSize
	if bs <= 0 {
		bs = DefaultBlockSize
	}
	// At best the turn finds the previous context cached in whole blocks,
	// less the last token (never cached) and one block of slack for the
	// previous answer's tail as the template renders it.
	ideal := (min(t.PrevContext, t.Prompt)-1)/bs*bs - bs
	newPart := min(uncached, max(t.Prompt-max(ideal, 0), 0))
	avoidable := uncached - newPart
	if avoidable <= 0 {
		return []Part{{MissNew, uncached}}
	}
	parts := make([]Part, 0, 2)
	if newPart > 0 {
		parts = append(parts, Part{MissNew, newPart})
	}
	return append(parts, Part{avoidableReason(t, ideal), avoidable})
}

func avoidableReason(t Turn, ideal int) string {
	b, a := t.Before, t.After
	switch {
	case !b.Known:
		switch {
		case t.Moved:
			return MissMoved
		case t.EstimateResident:
			return MissUnknown
		}
		return MissEvicted // the estimate said gone: evicted, by its own reckoning
	case b.Lost:
		return MissRestarted
	case t.Moved || b.Chain == 0:
		return MissMoved
	case a.Known && a.Lost:
		return MissRestarted
	case (a.Known && a.Evicted > b.Evicted) || b.Tokens < ideal:
		return MissEvicted
	}
	return MissPrefixChanged
}
