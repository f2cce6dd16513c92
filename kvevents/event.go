package kvevents

// Kind is an event's type.
type Kind uint8

const (
	// KindStored is vLLM's BlockStored: blocks entered a cache tier (or, in the full
	// report mode, were re-reported as a request's reused prefix).
	KindStored Kind = iota + 1
	// KindRemoved is BlockRemoved: blocks left a cache tier (one copy of each hash).
	KindRemoved
	// KindCleared is AllBlocksCleared: the prefix cache was reset.
	KindCleared
)

// String returns vLLM's class name of the kind ("" for an unknown kind).
func (k Kind) String() string {
	switch k {
	case KindStored:
		return "BlockStored"
	case KindRemoved:
		return "BlockRemoved"
	case KindCleared:
		return "AllBlocksCleared"
	}
	return ""
}

func kindOf(name string) Kind {
	switch name {
	case "BlockStored":
		return KindStored
	case "BlockRemoved":
		return KindRemoved
	case "AllBlocksCleared":
		return KindCleared
	}
	return 0
}

// Medium names of vLLM's cache tiers.
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// Event is one KV-cache event. Fields a kind does not carry stay zero.
type Event struct {
	Kind Kind
	// Hashes are block_hashes, in chain order. vLLM's int hashes (its default,
	// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) are 64-bit; a bytes hash (sha256) is folded to
	// its last 8 bytes big-endian, the same value vLLM's int form takes.
	Hashes []uint64
	// Parent is parent_block_hash; HasParent is false when it was null (a chain's start,
	// and every full-report re-report).
	Parent    uint64
	HasParent bool
	// Tokens is len(token_ids). Decode counts the ids without keeping them.
	Tokens int
	// TokenIDs are written by Encode (nil: an empty list); Decode leaves them nil.
	TokenIDs  []uint32
	BlockSize int
	// Medium is the tier ("GPU", "CPU", ...); "" when null or absent.
	Medium string
	// SessionID is the session_id of the request that caused a BlockStored; "" when absent.
	SessionID string
	LoraName  string
	// GroupIdx is the KV-cache group (0 when absent).
	GroupIdx int
}

// Batch is one published message: the events of one engine step.
type Batch struct {
	// Seq is the sequence number from the message's second frame, not from the payload.
	Seq uint64
	// Time is ts, seconds since the epoch as the engine's clock read it.
	Time float64
	// Rank is data_parallel_rank; HasRank is false when the payload omitted it.
	Rank    int
	HasRank bool
	Events  []Event
}
