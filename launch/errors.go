package launch

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// StartupError is why a rank did not become healthy during Start. Its
// Error() is the user-facing message: rank and exit, then vLLM's line that
// names the cause and a hint naming what to do, then a few lines of the
// rank's log and its path.
type StartupError struct {
	Rank  int
	Port  int
	Where string // what the rank runs on: "GPU 0", "CPU 0-3"; empty for the simulator
	Cause string // "exited with status 1", "not healthy after 10m0s", "canceled", "cannot start: ..."
	// Reason is vLLM's line, anywhere in what the rank printed since it
	// started, that names the root cause, without vLLM's log prefix
	// ("ValueError: To serve at least one request ..."); "" when none was
	// found. Never a warning, nor vLLM's pointer to a cause stated above
	// ("Engine core initialization failed. See root cause above.") when
	// the cause itself was printed.
	Reason     string
	ReasonLine int    // Reason's line number in LogPath (from 1); 0 when unknown
	Hint       string // what to do; "" when the cause is not a known one
	// Context is the log lines Error shows: the lines up to and including
	// Reason's, or without a Reason the last few. Nil (a StartupError built
	// by hand): Error shows all of LastLines, then the hint.
	Context    []string
	LinesAfter int      // how many log lines follow Reason's
	LastLines  []string // the rank's last output lines, oldest first
	LogPath    string
}

// Error renders the whole report, several lines long.
func (e *StartupError) Error() string {
	var b strings.Builder
	where := fmt.Sprintf("port %d", e.Port)
	if e.Where != "" {
		where += ", " + e.Where
	}
	fmt.Fprintf(&b, "engine rank %d (%s) failed to start: %s", e.Rank, where, e.Cause)
	if e.Context == nil {
		if len(e.LastLines) > 0 {
			fmt.Fprintf(&b, "\nlast lines of %s:", e.LogPath)
			for _, l := range e.LastLines {
				b.WriteString("\n  | " + l)
			}
		}
		if e.Hint != "" {
			b.WriteString("\nhint: " + e.Hint)
		}
		if e.LogPath != "" {
			b.WriteString("\nfull log: " + e.LogPath)
		}
		return b.String()
	}
	if e.Reason != "" {
		b.WriteString("\ncause: " + e.Reason)
	}
	if e.Hint != "" {
		b.WriteString("\nhint: " + e.Hint)
	}
	if len(e.Context) > 0 {
		switch {
		case e.Reason != "" && e.ReasonLine > 0:
			fmt.Fprintf(&b, "\nlast lines of %s up to the cause, line %d:", e.LogPath, e.ReasonLine)
		case e.Reason != "":
			fmt.Fprintf(&b, "\nlast lines of %s up to the cause:", e.LogPath)
		default:
			fmt.Fprintf(&b, "\nlast lines of %s:", e.LogPath)
		}
		for _, l := range e.Context {
			b.WriteString("\n  | " + l)
		}
	}
	if e.LogPath != "" {
		b.WriteString("\nfull log: " + e.LogPath)
		switch {
		case e.Reason == "" || e.LinesAfter <= 0:
		case e.LinesAfter == 1:
			b.WriteString(" (1 more line after the cause)")
		default:
			fmt.Fprintf(&b, " (%d more lines after the cause)", e.LinesAfter)
		}
	}
	return b.String()
}

// exitHint adds what a bare signal death suggests when the log names nothing.
func exitHint(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "the engine was killed by SIGKILL: the host may have run out of RAM (check `dmesg` for the OOM killer)"
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }
