package enginelog

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/lmwarden/warden/engineplan"
)

// tailLines is how many of an engine's last output lines are kept for error
// messages.
const tailLines = 40

// maxLineBytes bounds one kept line (and an unfinished one): longer lines
// are cut there, so a run's memory stays bounded whatever it prints.
const maxLineBytes = 16 << 10

// maxKept is how many cause lines (classify) a run keeps from anywhere in its
// output; ctxBefore is how many lines before each are kept with it.
const (
	maxKept   = 64
	ctxBefore = 2
)

// maxCues is how many cue lines (cause lines with a rule's marker) Cues
// returns.
const maxCues = 4

// Tail keeps what an engine's output says about why it stopped, in
// bounded memory: the last tailLines lines (and the partial one), and from
// anywhere in the output the lines that can state a cause (classify: an
// exception, an error, a line with a hint rule's marker), each with the
// lines just before it and its line number. vLLM states a cause once, in
// the process that hit it, and the tracebacks of the processes above it
// push it out of the last lines. launch feeds it an engine's log file; it
// passes the bytes on to out. A carriage return ends a line too, so
// progress bars show their latest state. Safe for concurrent use.
type Tail struct {
	out io.Writer

	mu      sync.Mutex
	lines   []string // ring of the last tailLines lines, oldest first
	kept    []*keptLine
	nl      int // newlines so far: the line being read is nl+1
	seq     int // lines pushed so far
	partial []byte
	wrote   bool
}

// keptLine is a cause line kept from anywhere in the output. A line whose
// message repeats one kept already only refreshes lastSeq.
type keptLine struct {
	n       int      // its line number in the run's output, from 1
	seq     int      // push order of its first occurrence
	lastSeq int      // push order of its latest occurrence
	text    string   // as printed
	msg     string   // text without vLLM's log prefix
	kind    lineKind // what it is, for the choice of the reason
	marked  bool     // it carries a hint rule's marker
	generic bool     // it only points to a cause stated elsewhere (isGeneric)
	before  []string // up to ctxBefore lines printed just before it
}

// NewTail returns a Tail that passes what it is written on to out.
func NewTail(out io.Writer) *Tail { return &Tail{out: out} }

// Write records p's lines and writes p to out.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.wrote = t.wrote || len(p) > 0
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexAny(rest, "\r\n")
		if i < 0 {
			t.addPartial(rest)
			break
		}
		t.addPartial(rest[:i])
		line := string(t.partial)
		t.partial = t.partial[:0]
		if strings.TrimSpace(line) != "" {
			t.push(line)
		}
		if rest[i] == '\n' {
			t.nl++
		}
		rest = rest[i+1:]
	}
	t.mu.Unlock()
	return t.out.Write(p)
}

// addPartial appends b to the unfinished line, up to maxLineBytes.
func (t *Tail) addPartial(b []byte) {
	if room := maxLineBytes - len(t.partial); room < len(b) {
		b = b[:max(room, 0)]
	}
	t.partial = append(t.partial, b...)
}

func (t *Tail) push(line string) {
	t.seq++
	if msg, kind := classify(line); kind != notCause {
		t.keep(line, msg, kind)
	}
	if len(t.lines) == tailLines {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:tailLines-1]
	}
	t.lines = append(t.lines, line)
}

// keep records a cause line; when maxKept are kept, the least telling one
// goes (plain errors before exceptions before lines with a rule's marker,
// the oldest first).
func (t *Tail) keep(line, msg string, kind lineKind) {
	for _, k := range t.kept {
		if k.msg == msg {
			k.lastSeq = t.seq
			return
		}
	}
	k := &keptLine{n: t.nl + 1, seq: t.seq, lastSeq: t.seq, text: line, msg: msg, kind: kind, marked: hasMarker(line),
		generic: isGeneric(msg),
		before:  append([]string(nil), t.lines[max(len(t.lines)-ctxBefore, 0):]...)}
	if len(t.kept) == maxKept {
		drop := 0
		for i, o := range t.kept {
			if o.rank() < t.kept[drop].rank() || o.rank() == t.kept[drop].rank() && o.lastSeq < t.kept[drop].lastSeq {
				drop = i
			}
		}
		t.kept = append(t.kept[:drop], t.kept[drop+1:]...)
	}
	t.kept = append(t.kept, k)
}

// rank orders kept lines by what they tell, for eviction.
func (k *keptLine) rank() int {
	switch {
	case k.marked:
		return 2
	case k.kind == exceptionLine && !k.generic:
		return 1
	}
	return 0
}

// Lines returns the last lines written (at most tailLines), oldest first,
// including an unfinished last line.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.linesLocked()
}

func (t *Tail) linesLocked() []string {
	out := append([]string(nil), t.lines...)
	if p := strings.TrimSpace(string(t.partial)); p != "" {
		out = append(out, string(t.partial))
	}
	return out
}

// Cues returns the last few (maxCues) lines, anywhere in the output so
// far, that carry a hint rule's marker, oldest first: causes vLLM states
// far above the end of its tracebacks.
func (t *Tail) Cues() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, k := range t.kept {
		if k.marked {
			out = append(out, k.text)
		}
	}
	return out[max(len(out)-maxCues, 0):]
}

// Last returns the latest non-empty output line, "" when none yet.
func (t *Tail) Last() string {
	l := t.Lines()
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

// Wrote reports whether the engine has written anything yet.
func (t *Tail) Wrote() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wrote
}

// Diagnosis is what an engine's output says about why it stopped.
type Diagnosis struct {
	Reason  string   // vLLM's line that names the cause, its log prefix cut; "" when none
	Line    int      // the reason's line number in the run's output (from 1)
	After   int      // how many output lines follow it
	Context []string // the lines just before the reason, and the reason as printed
	Hint    string   // what to do, from the first hint rule whose marker a cause line carries
	Known   bool     // the reason is a hint rule's line, not just the last exception
}

// Diagnose finds the cause in the kept lines whose latest occurrence is
// among the output's last `within` lines (0: all). A hint rule whose
// marker a kept line carries names the reason (rules in order; of the
// rule's lines the first that is not a pointer to a cause above it); else the reason is the latest exception that is
// not one of vLLM's pointers to a cause stated above it ("Engine core
// initialization failed. See root cause above."), else the latest error
// line, else the latest pointer.
func (t *Tail) Diagnose(port, within int) Diagnosis {
	t.mu.Lock()
	defer t.mu.Unlock()
	var kept []*keptLine
	for _, k := range t.kept {
		if within <= 0 || k.lastSeq > t.seq-within {
			kept = append(kept, k)
		}
	}
	var d Diagnosis
	var pick *keptLine
	if r, lines := firstRule(kept); r != nil {
		// The first of its lines that is not a pointer to another: where
		// it was raised, not the tracebacks that pass it on.
		pick = first(lines, func(k *keptLine) bool { return !k.generic })
		if pick == nil {
			pick = first(lines, func(*keptLine) bool { return true })
		}
		// A rule's line that is pydantic's header ("argument --X: 1
		// validation error for C") says which flag; the detail under it
		// says what is wrong with it.
		if d := first(kept, func(k *keptLine) bool { return k.seq > pick.seq && rePydanticDetail.MatchString(k.msg) }); d != nil {
			pick = d
		}
		var all []string
		for _, k := range kept {
			all = append(all, k.text)
		}
		d.Hint, d.Known = r.Hint(strings.Join(all, "\n"), port), true
	} else {
		for _, pass := range []func(*keptLine) bool{
			func(k *keptLine) bool { return k.kind == exceptionLine && !k.generic },
			func(k *keptLine) bool { return !k.generic },
			func(*keptLine) bool { return true },
		} {
			if pick = latest(kept, pass); pick != nil {
				break
			}
		}
	}
	if pick != nil {
		d.Reason, d.Line, d.After = pick.msg, pick.n, t.nl-pick.n
		if len(t.partial) > 0 {
			d.After++
		}
		d.Context = append(append([]string(nil), pick.before...), pick.text)
	}
	return d
}

// firstRule returns the first hint rule (engineplan.OffloadRefusals, then
// engineplan.Refusals)
// whose marker a kept line carries, with those lines.
func firstRule(kept []*keptLine) (*engineplan.Refusal, []*keptLine) {
	for _, rules := range [][]engineplan.Refusal{engineplan.OffloadRefusals, engineplan.Refusals} {
		for i := range rules {
			var lines []*keptLine
			for _, k := range kept {
				if rules[i].Matches(k.text) {
					lines = append(lines, k)
				}
			}
			if len(lines) > 0 {
				return &rules[i], lines
			}
		}
	}
	return nil, nil
}

// first is the kept line, of those ok accepts, printed first.
func first(kept []*keptLine, ok func(*keptLine) bool) *keptLine {
	var pick *keptLine
	for _, k := range kept {
		if ok(k) && (pick == nil || k.seq < pick.seq) {
			pick = k
		}
	}
	return pick
}

// latest is the kept line, of those ok accepts, printed last.
func latest(kept []*keptLine, ok func(*keptLine) bool) *keptLine {
	var pick *keptLine
	for _, k := range kept {
		if ok(k) && (pick == nil || k.lastSeq > pick.lastSeq) {
			pick = k
		}
	}
	return pick
}
