package launch

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// tailLines is how many of an engine's last output lines are kept for error
// messages.
const tailLines = 40

// tailWriter keeps the last complete lines (and the partial one) of an
// engine's output, read back from its log file, and passes the bytes on to out. A carriage return ends a
// line too, so progress bars show their latest state. Safe for concurrent use.
type tailWriter struct {
	out io.Writer

	mu      sync.Mutex
	lines   []string // ring of the last tailLines lines, oldest first
	cues    []string // the last maxCues lines with an offloadRules marker (isCue), oldest first
	partial []byte
	wrote   bool
}

// maxCues is how many cue lines are kept.
const maxCues = 4

func newTailWriter(out io.Writer) *tailWriter { return &tailWriter{out: out} }

// Write records p's lines and writes p to out.
func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.wrote = t.wrote || len(p) > 0
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexAny(rest, "\r\n")
		if i < 0 {
			t.partial = append(t.partial, rest...)
			break
		}
		line := string(append(t.partial, rest[:i]...))
		t.partial = t.partial[:0]
		rest = rest[i+1:]
		if strings.TrimSpace(line) != "" {
			t.push(line)
		}
	}
	t.mu.Unlock()
	return t.out.Write(p)
}

func (t *tailWriter) push(line string) {
	if isCue(line) {
		if len(t.cues) == maxCues {
			t.cues = append(t.cues[:0], t.cues[1:]...)
		}
		t.cues = append(t.cues, line)
	}
	if len(t.lines) == tailLines {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:tailLines-1]
	}
	t.lines = append(t.lines, line)
}

// Lines returns the last lines written (at most tailLines), oldest first,
// including an unfinished last line.
func (t *tailWriter) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if p := strings.TrimSpace(string(t.partial)); p != "" {
		out = append(out, string(t.partial))
	}
	return out
}

// Cues returns the lines, anywhere in the output so far, that carry an
// offloadRules marker (the last few, oldest first): causes vLLM states far
// above the end of its tracebacks.
func (t *tailWriter) Cues() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.cues...)
}

// Last returns the latest non-empty output line, "" when none yet.
func (t *tailWriter) Last() string {
	l := t.Lines()
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

// Wrote reports whether the engine has written anything yet.
func (t *tailWriter) Wrote() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wrote
}
