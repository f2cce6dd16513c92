package launch

// State is the lifecycle of one rank's engine. It is written only by the
// rank's supervisor goroutine.
type State int

const (
	Starting State = iota // process started, no output yet
	Loading               // process writing output, /health not yet 200
	Ready                 // /health answered 200
	Down                  // process exited or failed; a restart may follow
	Stopped               // stopped by Stop or by a failed Start; final
)

var stateNames = [...]string{"starting", "loading", "healthy", "down", "stopped"}

// String is the lowercase name shown in progress lines and logs.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "unknown"
	}
	return stateNames[s]
}
