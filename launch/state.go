package launch

import "time"

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

// Crash is a rank's engine going down, as the launcher saw it: why, what
// to do, and where its restarts stand. Options.OnCrash gets one on every
// crash and failed restart, before the wait; Group.LastCrash keeps the
// latest.
type Crash struct {
	At    time.Time // when it went down, or its restart failed
	Cause string    // "exited with status 1: <vLLM's cause line>", "not healthy after 10m0s", ...
	Fix   string    // what to do, for a known cause; "" otherwise
	// Failures counts the failures in a row, this one included: crashes
	// within StableAfter of becoming healthy, and failed restarts.
	Failures int
	// Loop is Failures >= CrashLoopAfter: the cause and its fix were
	// logged once, as an error, and each restart since says less.
	Loop     bool
	Restarts int           // restarts tried since Start, not counting the coming one
	Delay    time.Duration // the wait before the coming restart
	LogPath  string        // the rank's log
}
