// Package fdlimit raises the process's file-descriptor soft limit to its
// hard limit: every idle keep-alive connection of a coding agent holds one
// descriptor in the warden, and every stream another to its engine. Go's
// runtime (1.19+) already raises the soft limit of its own process at start,
// to the hard limit less one, and gives child processes the original one
// back (vLLM raises its own). Raise makes the warden's limit explicit and
// reports it; where Go has raised it, Raise leaves it (a Setrlimit would
// make the engines inherit the raised limit). It touches nothing else.
package fdlimit

// Limit is the file-descriptor limit after Raise.
type Limit struct {
	Soft, Hard uint64
	// From is the soft limit Raise found; equal to Soft when it was
	// already the hard limit or one less (as Go's runtime leaves it).
	From uint64
}

// Raised reports whether Raise changed the soft limit.
func (l Limit) Raised() bool { return l.Soft != l.From }
