package launch

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/lmwarden/warden/engineplan"
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

// Hint names the known cause that lines state (as the warden reads an
// engine's output: cause lines only, see isCause), or "" when none does.
// port is the rank's port, for the port-in-use hint.
func Hint(lines []string, port int) string {
	t := newTailWriter(io.Discard)
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			t.push(l)
		}
	}
	return t.diagnose(port, 0).hint
}

// exitHint adds what a bare signal death suggests when the log names nothing.
func exitHint(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "the engine was killed by SIGKILL: the host may have run out of RAM (check `dmesg` for the OOM killer)"
	}
	return ""
}

// lineKind is what a line of an engine's output can tell about a cause.
type lineKind int

const (
	notCause      lineKind = iota // progress, INFO, warnings, traceback frames
	exceptionLine                 // "ValueError: ...", "vllm: error: ...", "Fatal Python error: ..."
	errorLine                     // logged at ERROR or CRITICAL
	markerLine                    // none of those, but with a hint rule's marker
)

var (
	// rePrefix is vLLM's prefix of a line: the process it came from, then
	// for a logged line its level, time and source.
	// (EngineCore_DP0 pid=18799) ERROR 10-08 20:33:48 [core.py:708] ...
	rePrefix = regexp.MustCompile(`^(?:\([\w.:\-]+(?: pid=\d+)?\) )?` +
		`(?:(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?)?`)
	// reException is an exception's last line, as Python prints it.
	reException = regexp.MustCompile(`^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::\s|$)` +
		`|^Fatal Python error: |^[\w.\- ]+: error: |^terminate called after throwing`)
	// reWarning is a warning that is not a logged one: Python's warnings
	// module ("/x.py:254: UserWarning: ..."), PyTorch's C++ ("[W1201 ...").
	reWarning = regexp.MustCompile(`^\S*:\d+: \w*Warning: |^\[W\d{4} |^\w*Warning: `)
	// reGeneric are vLLM's pointers to a cause printed above them, and
	// the ends of tracebacks that say nothing of their own.
	reGeneric = regexp.MustCompile(`(?i)root cause|initialization failed|failed to start\.?$|^\w+ failed\.?$|` +
		`hit an exception\.?$|died unexpectedly|^SystemExit|^KeyboardInterrupt|^asyncio\.exceptions\.CancelledError`)
)

// classify says what line can tell about a cause, and returns its message
// (the line without vLLM's prefix). A warning is never a cause, nor is a
// traceback's frame or a line logged below ERROR.
func classify(line string) (string, lineKind) {
	m := rePrefix.FindStringSubmatchIndex(line)
	msg := strings.TrimRight(line[m[1]:], " \t")
	level := ""
	if m[2] >= 0 {
		level = line[m[2]:m[3]]
	}
	switch {
	case level == "DEBUG" || level == "INFO" || warningLevel(level) || warningMsg(msg):
		return msg, notCause
	case strings.HasPrefix(msg, " ") || strings.HasPrefix(msg, "\t"):
		if t := strings.TrimSpace(msg); strings.HasPrefix(t, "what():") { // C++ std::terminate
			return t, exceptionLine
		}
		return msg, notCause // traceback frames and their source lines
	case reException.MatchString(msg):
		return msg, exceptionLine
	case level == "ERROR" || level == "CRITICAL":
		if strings.HasPrefix(msg, "Traceback (most recent call last)") {
			return msg, notCause
		}
		return msg, errorLine
	case hasMarker(msg):
		return msg, markerLine
	}
	return msg, notCause
}

// isWarning reports whether line is a warning: logged at WARNING, Python's
// warnings module, PyTorch's C++ warnings, the resource tracker's leaks.
func isWarning(line string) bool {
	m := rePrefix.FindStringSubmatchIndex(line)
	return m[2] >= 0 && warningLevel(line[m[2]:m[3]]) || warningMsg(line[m[1]:])
}

func warningLevel(level string) bool { return level == "WARNING" || level == "WARN" }

func warningMsg(msg string) bool {
	return reWarning.MatchString(msg) || strings.Contains(msg, "resource_tracker: There appear to be")
}

// isGeneric reports whether msg only points to a cause stated elsewhere.
func isGeneric(msg string) bool { return reGeneric.MatchString(msg) }

// hasMarker reports whether line carries a hint rule's marker.
func hasMarker(line string) bool {
	for _, rules := range [][]engineplan.Refusal{engineplan.OffloadRefusals, engineplan.Refusals} {
		for i := range rules {
			if rules[i].Matches(line) {
				return true
			}
		}
	}
	return false
}

// isCue reports whether line is a cause line with a hint rule's marker
// (tailWriter.Cues returns such lines).
func isCue(line string) bool {
	_, kind := classify(line)
	return kind != notCause && hasMarker(line)
}

func itoa(n int) string { return strconv.Itoa(n) }
