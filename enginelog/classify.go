package enginelog

import (
	"io"
	"regexp"
	"strings"

	"github.com/lmwarden/warden/engineplan"
)

// Hint names the known cause that lines state (as the warden reads an
// engine's output: cause lines only, see classify), or "" when none does.
// port is the rank's port, for the port-in-use hint.
func Hint(lines []string, port int) string {
	t := NewTail(io.Discard)
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			t.push(l)
		}
	}
	return t.Diagnose(port, 0).Hint
}

// LastMessage is the latest of lines that is neither a warning nor a
// traceback's frame, without vLLM's log prefix and trimmed; ok is false
// when every line is one of those.
func LastMessage(lines []string) (msg string, ok bool) {
	for i := len(lines) - 1; i >= 0; i-- {
		msg, _ := classify(lines[i])
		if !isWarning(lines[i]) && !strings.HasPrefix(msg, " ") && !strings.HasPrefix(msg, "\t") {
			return strings.TrimSpace(msg), true
		}
	}
	return "", false
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
	// rePydanticDetail is the indented detail line pydantic prints under
	// "ValidationError: 1 validation error for ModelConfig": vLLM's config
	// checks raise ValueError inside a validator ("Value error, User-specified
	// max_model_len (999999) is greater than the derived max_model_len ..."),
	// and pydantic's own checks end the line with the error's type
	// ("Unexpected keyword argument [type=unexpected_keyword_argument, ...]"
	// under the field's name, for -- --kv-events-config '{"bogus": 1}').
	rePydanticDetail = regexp.MustCompile(`^(?:Value|Assertion|Type) error, |\[type=\w+[,\]]`)
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
		} else if rePydanticDetail.MatchString(t) {
			// The detail under pydantic's "N validation error(s) for X"
			// header: what vLLM's config check actually says.
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
// (Tail.Cues returns such lines).
func isCue(line string) bool {
	_, kind := classify(line)
	return kind != notCause && hasMarker(line)
}
