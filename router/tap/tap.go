// Package tap reads the usage an engine reports in its answer while the
// answer passes through to the client unchanged: a whole JSON body, or an
// SSE stream as the engine flushes it (the usage sits in its final events).
// For OpenAI streams it can drop exactly the usage-only chunk that the
// warden asked for on a client's behalf, and it ends a stream the engine
// broke off with an error event in the request's API format. It knows the
// three APIs' usage shapes (internal/usage for Anthropic's) and nothing of
// replicas or routing.
package tap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/usage"
)

// Kind is the response format a tap reads usage from.
type Kind int

// The APIs whose answers carry usage.
const (
	None      Kind = iota
	OpenAI         // /v1/chat/completions, /v1/completions
	Anthropic      // /v1/messages
	Responses      // /v1/responses
)

// KindOf is the API of a proxied path (None: one without usage).
func KindOf(path string) Kind {
	switch path {
	case "/v1/chat/completions", "/v1/completions":
		return OpenAI
	case "/v1/messages":
		return Anthropic
	case "/v1/responses":
		return Responses
	}
	return None
}

// ErrorEvent is the SSE event that ends a stream the engine broke off, in
// the format of the request's API, so that SDKs raise it as an error.
func ErrorEvent(kind Kind, msg string) []byte {
	m, _ := json.Marshal(msg)
	switch kind {
	case Anthropic:
		return fmt.Appendf(nil, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":%s}}\n\n", m)
	case Responses:
		return fmt.Appendf(nil, "event: error\ndata: {\"type\":\"error\",\"code\":\"warden_error\",\"message\":%s,\"param\":null}\n\n", m)
	}
	return fmt.Appendf(nil, "data: {\"error\":{\"message\":%s,\"type\":\"warden_error\",\"code\":502}}\n\n", m)
}

// maxJSONTap bounds how much of a non-streaming response the tap keeps to
// read its usage; longer bodies pass through but report nothing.
const maxJSONTap = 4 << 20

// Usage is one finished request's usage report. Known is false when the
// engine sent none (the request then counts as computed, never estimated).
type Usage struct {
	Known      bool
	Prompt     uint64 // all prompt tokens, cached included
	Cached     uint64
	Completion uint64
}

// Options tune a Tap.
type Options struct {
	Stream bool // the body is SSE; else one JSON document
	// Strip drops the usage-only chunk ("choices":[] + usage) of an OpenAI
	// stream, which the warden asked for on behalf of a client that did not.
	Strip bool
	Now   func() time.Time // stamps the first byte; nil: time.Now
	Alive func() bool      // the client is still there; nil: yes
	// Fail, for SSE, is the event that ends a stream the engine broke off
	// (not EOF, the client still there) instead of a cut connection; nil:
	// the read error passes on.
	Fail func(err error) []byte
}

// Tap wraps an engine response body. It passes bytes through as they come
// (so SSE events reach the client as the engine flushes them) and reads the
// usage report on the side.
type Tap struct {
	rc     io.ReadCloser
	kind   Kind
	stream bool
	strip  bool
	now    func() time.Time

	usage      Usage
	firstByte  time.Time
	firstToken time.Time
	buf        []byte // stream: bytes of the current unfinished line/event; JSON: the body so far
	out        []byte // strip mode: bytes ready for the client
	event      []byte // strip mode: lines of the current event
	eof        error
	overflow   bool

	fail    func(err error) []byte // Options.Fail
	alive   func() bool            // Options.Alive
	failed  error
	tailing bool
	tail    []byte // the error event still to hand out
	last    [2]byte
}

// New taps rc, an answer in kind's format.
func New(rc io.ReadCloser, kind Kind, o Options) *Tap {
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Tap{rc: rc, kind: kind, stream: o.Stream, strip: o.Strip && o.Stream, now: o.Now, alive: o.Alive, fail: o.Fail}
	if t.strip { // the line, the event and the bytes ready: one allocation that holds typical events
		slab := make([]byte, 3*stripSlab)
		t.buf, t.event, t.out = slab[:0:stripSlab], slab[stripSlab:stripSlab:2*stripSlab], slab[2*stripSlab:2*stripSlab]
	}
	return t
}

// stripSlab is the room strip mode starts with for each of a line, an event
// and the bytes ready for the client (they grow past it as needed).
const stripSlab = 512

// Usage is what the answer reported so far (all of it once read to EOF).
func (t *Tap) Usage() Usage { return t.usage }

// FirstByte is when the first byte of the answer was read; zero before.
func (t *Tap) FirstByte() time.Time { return t.firstByte }

// FirstToken is when the first content of the answer was read: the first
// stream event that carries text, reasoning or a tool call (not a
// role-only chunk, message_start, a ping or an empty delta), or a whole
// JSON answer's first byte. Zero before; a stream that never carried
// content has none.
func (t *Tap) FirstToken() time.Time {
	if !t.stream {
		return t.firstByte
	}
	return t.firstToken
}

// Failed is the error that broke the engine's body off, nil if none.
func (t *Tap) Failed() error { return t.failed }

// Read passes the engine's bytes through, parsing usage on the way. A
// stream that breaks off ends with the error event (see fail).
func (t *Tap) Read(p []byte) (int, error) {
	if t.tailing {
		return t.readTail(p)
	}
	var n int
	var err error
	if t.strip {
		n, err = t.readStripped(p)
	} else {
		n, err = t.readPlain(p)
	}
	t.remember(p[:n])
	if err == nil || err == io.EOF || (t.alive != nil && !t.alive()) {
		return n, err
	}
	t.failed = err
	if t.fail == nil {
		return n, err
	}
	t.tailing, t.tail = true, append(t.separator(), t.fail(err)...)
	if n > 0 {
		return n, nil
	}
	return t.readTail(p)
}

// remember keeps the last two bytes handed out, to end a partial event
// before the error event.
func (t *Tap) remember(b []byte) {
	switch {
	case len(b) >= 2:
		t.last = [2]byte{b[len(b)-2], b[len(b)-1]}
	case len(b) == 1:
		t.last = [2]byte{t.last[1], b[0]}
	}
}

// separator is what ends the bytes handed out so far as a whole event: no
// extra blank line when one just ended (an empty event breaks clients).
func (t *Tap) separator() []byte {
	switch {
	case t.last == [2]byte{} || t.last == [2]byte{'\n', '\n'}:
		return nil
	case t.last[1] == '\n':
		return []byte("\n")
	}
	return []byte("\n\n")
}

func (t *Tap) readTail(p []byte) (int, error) {
	n := copy(p, t.tail)
	t.tail = t.tail[n:]
	if len(t.tail) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func (t *Tap) readPlain(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 {
		t.first()
		t.observe(p[:n])
	}
	if err == io.EOF && !t.stream && !t.overflow {
		t.parseJSON(t.buf)
	}
	return n, err
}

func (t *Tap) first() {
	if t.firstByte.IsZero() {
		t.firstByte = t.now()
	}
}

// Close closes the engine body.
func (t *Tap) Close() error { return t.rc.Close() }

// Write feeds bytes of an answer that a data plane sees in chunks instead
// of reading it (a gateway's external processor: the gateway carries the
// bytes): the usage and the first byte are read from them as Read would.
// A tap fed this way is made with New(nil, ...) and ended with End.
func (t *Tap) Write(b []byte) (int, error) {
	if len(b) > 0 {
		t.first()
		t.observe(b)
	}
	return len(b), nil
}

// Pass feeds b like Write and returns the bytes to hand on to the client:
// b itself, or in strip mode (Options.Strip) whole SSE events without the
// usage-only chunk; an event is held until its blank line arrives, and
// end (the answer's last piece) hands on what is left as it is. The
// returned slice is the caller's.
func (t *Tap) Pass(b []byte, end bool) []byte {
	if !t.strip {
		t.Write(b)
		return b
	}
	if len(b) > 0 {
		t.first()
		t.splitEvents(b)
	}
	if end {
		t.out = append(append(t.out, t.event...), t.buf...)
		t.buf, t.event = t.buf[:0], t.event[:0]
	}
	out := bytes.Clone(t.out)
	t.out = t.out[:0]
	return out
}

// End marks the end of an answer fed with Write: a whole JSON answer is
// parsed for its usage now; err, when not nil, is what broke it off.
func (t *Tap) End(err error) {
	if err != nil {
		t.failed = err
		return
	}
	if !t.stream && !t.overflow {
		t.parseJSON(t.buf)
	}
}

// observe feeds bytes to the line parser (streams) or the JSON buffer.
func (t *Tap) observe(b []byte) {
	if !t.stream {
		if len(t.buf)+len(b) > maxJSONTap {
			t.overflow, t.buf = true, nil
		}
		if !t.overflow {
			t.buf = append(t.buf, b...)
		}
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.buf = append(t.buf, b...)
			return
		}
		line := b[:i]
		if len(t.buf) > 0 {
			t.buf = append(t.buf, line...)
			line = t.buf
		}
		t.line(line)
		t.buf = t.buf[:0]
		b = b[i+1:]
	}
}

// line parses one SSE line; only data lines carry usage. It reports whether
// the line is the usage-only chunk of an OpenAI stream.
func (t *Tap) line(l []byte) bool {
	l = bytes.TrimRight(l, "\r")
	d, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return false
	}
	d = bytes.TrimSpace(d)
	if len(d) == 0 || d[0] != '{' {
		return false
	}
	if t.firstToken.IsZero() && hasContent(t.kind, d) {
		t.firstToken = t.now()
	}
	if !t.parseJSON(d) || t.kind != OpenAI {
		return false
	}
	ch := gjson.GetBytes(d, "choices")
	return ch.IsArray() && len(ch.Array()) == 0 && gjson.GetBytes(d, "usage").IsObject()
}

// Content markers of stream events (bytes.Contains before any parse).
var (
	anthropicDelta  = []byte(`"content_block_delta"`)
	responsesPrefix = []byte(`"type":"response.`)
	responsesDelta  = []byte(`.delta"`)
	openAIToolCalls = []byte(`"tool_calls":[{`)
	openAIFields    = [][]byte{[]byte(`"content":"`), []byte(`"reasoning_content":"`), []byte(`"reasoning":"`), []byte(`"text":"`)}
)

// hasContent reports whether a stream event carries answer content: text,
// reasoning or a tool call, in kind's event shapes.
func hasContent(kind Kind, d []byte) bool {
	switch kind {
	case Anthropic:
		return bytes.Contains(d, anthropicDelta)
	case Responses:
		return bytes.Contains(d, responsesPrefix) && bytes.Contains(d, responsesDelta)
	}
	if bytes.Contains(d, openAIToolCalls) {
		return true
	}
	for _, f := range openAIFields {
		for rest := d; ; {
			i := bytes.Index(rest, f)
			if i < 0 {
				break
			}
			rest = rest[i+len(f):]
			if len(rest) > 0 && rest[0] != '"' { // a non-empty string
				return true
			}
		}
	}
	return false
}

// parseJSON reads usage from one JSON document: a whole response or an SSE
// event payload. Fields seen later override earlier ones (Anthropic's
// message_delta carries the final output_tokens). It reports whether d had
// a usage object.
func (t *Tap) parseJSON(d []byte) bool {
	if !mayHaveUsage(d) {
		return false // most stream events: no parse at all
	}
	var u gjson.Result
	for _, path := range usagePaths {
		if !mayHold(d, path.first) {
			continue // the path's first key is not in d: no scan for it
		}
		if u = gjson.GetBytes(d, path.path); u.IsObject() {
			break
		}
	}
	if !u.IsObject() {
		return false
	}
	t.usage.Known = true
	t.parseUsage(u)
	return true
}

// parseUsage reads a usage object in the tap's API's shape.
func (t *Tap) parseUsage(u gjson.Result) {
	switch t.kind {
	case OpenAI:
		set(&t.usage.Prompt, u.Get("prompt_tokens"))
		set(&t.usage.Completion, u.Get("completion_tokens"))
		set(&t.usage.Cached, u.Get("prompt_tokens_details.cached_tokens"))
	case Responses:
		set(&t.usage.Prompt, u.Get("input_tokens"))
		set(&t.usage.Completion, u.Get("output_tokens"))
		set(&t.usage.Cached, u.Get("input_tokens_details.cached_tokens"))
	case Anthropic:
		a := usage.ParseAnthropic(u) // input_tokens excludes the cache (vLLM 0.32, Anthropic)
		if a.HasPrompt {
			t.usage.Prompt = a.Prompt
		}
		if a.HasCached {
			t.usage.Cached = a.Cached
		}
		if a.HasOutput {
			t.usage.Completion = a.Output
		}
	}
}

// usagePaths are where the APIs put usage, in the order they are tried:
// OpenAI's and Anthropic's message_delta at the top, Anthropic's
// message_start in its message, Responses' response.completed in its
// response; first is the path's first key.
var usagePaths = []struct{ path, first string }{
	{"usage", "usage"}, {"message.usage", "message"}, {"response.usage", "response"},
}

// mayHaveUsage reports whether d can hold a "usage" key (mayHold).
func mayHaveUsage(d []byte) bool { return mayHold(d, "usage") }

// mayHold reports whether d can hold the key: it spells it, or has a \u
// escape that could spell it. False means no gjson path through that key
// can match, so the lookup is skipped.
func mayHold(d []byte, key string) bool {
	return bytes.Contains(d, []byte(key)) || bytes.Contains(d, []byte(`\u`))
}

func set(dst *uint64, v gjson.Result) {
	if v.Exists() {
		*dst = v.Uint()
	}
}

// readStripped passes whole SSE events through, dropping the usage-only
// chunk. An event is held only until its terminating blank line arrives,
// which for an engine that flushes per event is the same read.
func (t *Tap) readStripped(p []byte) (int, error) {
	for len(t.out) == 0 && t.eof == nil {
		n, err := t.rc.Read(p)
		if n > 0 {
			t.first()
			t.splitEvents(p[:n])
		}
		if err != nil {
			t.eof = err
			t.out = append(t.out, t.event...) // an unterminated tail passes as is:
			t.out = append(t.out, t.buf...)   // the event's whole lines, then the partial one
			t.buf, t.event = nil, nil
		}
	}
	n := copy(p, t.out)
	t.out = t.out[:copy(t.out, t.out[n:])] // what p had no room for moves to the front: the buffer is reused
	if len(t.out) == 0 && t.eof != nil {
		return n, t.eof
	}
	return n, nil
}

// splitEvents collects lines into events and moves finished events to out.
func (t *Tap) splitEvents(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.buf = append(t.buf, b...)
			return
		}
		t.buf = append(t.buf, b[:i+1]...)
		b = b[i+1:]
		line := t.buf // consumed (copied) before t.buf is appended to again
		t.buf = t.buf[:0]
		if len(bytes.TrimRight(line, "\r\n")) == 0 { // blank line: the event is complete
			ev := append(t.event, line...)
			if !t.isUsageOnly(ev) {
				t.out = append(t.out, ev...)
			}
			t.event = t.event[:0]
			continue
		}
		t.event = append(t.event, line...)
	}
}

// isUsageOnly parses an event's data lines and reports whether it is the
// usage-only chunk.
func (t *Tap) isUsageOnly(ev []byte) bool {
	drop := false
	for l := range bytes.Lines(ev) {
		if t.line(bytes.TrimRight(l, "\n")) {
			drop = true
		}
	}
	return drop
}
