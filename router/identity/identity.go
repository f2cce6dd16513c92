// Package identity says which conversation a request belongs to: the
// session key of a proxied request and how it was found (agent headers,
// body fields, a fingerprint of the conversation's start), and the
// client's pin to a replica. It reads the request's headers and one pass
// over the body's top-level JSON keys (Scan), never unmarshalling a large
// agent body; the data planes share that scan with their request rewrites. It owns
// no state and imports nothing of the project; docs/clients.md says what
// each agent sends.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Session key sources, in the order Extract tries them (first match wins).
const (
	SourceClaudeHeader   = "claude-code-header"   // X-Claude-Code-Session-Id
	SourceClaudeMetadata = "claude-code-metadata" // metadata.user_id (JSON string or legacy _session_<uuid>)
	SourceCodexHeader    = "codex-header"         // session-id / session_id
	SourceOpencode       = "opencode-header"      // x-session-affinity / x-session-id
	SourceCustomHeader   = "header"               // a --session-header name
	SourcePromptCacheKey = "prompt_cache_key"     // prompt_cache_key / promptCacheKey
	SourceClientMetadata = "client_metadata"      // client_metadata.session_id (Codex Responses)
	SourceFingerprint    = "fingerprint"          // hash of model + system + first user message
	SourceUser           = "user"                 // user / safety_identifier (a person, last resort)
	SourceNone           = "none"
)

// PinHeader is the request header a client uses to pin a request to a
// replica rank; every proxied response carries it too, naming the replica
// that served it.
const PinHeader = "X-Warden-Replica"

// MaxKeyLen caps a session key; longer values are replaced by their hash.
const MaxKeyLen = 256

// BillingPrefix starts Claude Code's per-conversation first system block.
const BillingPrefix = "x-anthropic-billing-header:"

var legacyClaudeSession = regexp.MustCompile(`_session_([0-9a-fA-F-]{36})$`)

// SessionKey says which conversation a request belongs to and how that was
// found. The zero value (Key "") means no session could be identified.
//
// A subagent's request carries its parent's session id in Key: Claude
// Code's Agent tool adds x-claude-code-agent-id, a Codex child sends the
// root's session-id with its own thread-id (and x-codex-parent-thread-id).
// Agent holds that agent's own id; Subagent also marks opencode's child
// sessions (x-parent-session-id), which have a Key of their own.
type SessionKey struct {
	Key      string
	Source   string
	Agent    string // the subagent's id within Key's session; "" for the session's own conversation
	Subagent bool   // a subagent's request (Agent set, or a child session with its own Key)
}

// Conversation is the key placement uses: the session's key, or for a
// subagent with an agent id, session and agent (its own conversation: a
// subagent shares its parent's tools prompt at most, not its history)
// unless inherit keeps it on its parent's key.
func (k SessionKey) Conversation(inherit bool) string {
	if k.Agent == "" || inherit {
		return k.Key
	}
	return k.Key + AgentSeparator + k.Agent
}

// AgentSeparator joins a session key and an agent id in Conversation.
const AgentSeparator = "#agent:"

// Extract finds the conversation a request belongs to, trying the sources
// in the order docs/clients.md lists (first match wins): headers first,
// which cost no body parsing (Claude Code's X-Claude-Code-Session-Id,
// Codex's session-id/session_id, opencode's x-session-affinity/x-session-id,
// then the extra header names given), then body fields: Claude Code's
// metadata.user_id, prompt_cache_key/promptCacheKey,
// client_metadata.session_id, a fingerprint of model + system prompt + first
// user message, and last user / safety_identifier (a person, not a
// conversation). body may be malformed or empty; it is read in one pass over
// its top-level keys with gjson, never unmarshalled. The pin header is not a
// session source: see ParsePin.
func Extract(h http.Header, body []byte, extraHeaders []string) SessionKey {
	if k, ok := fromHeaders(h, extraHeaders); ok {
		return k // no body scan needed
	}
	return withBodyAgent(h, fromFields(Scan(body)))
}

// ExtractFrom is Extract over a body already scanned (the core's request
// path scans once and may have mapped the model name in f first).
func ExtractFrom(h http.Header, f Fields, extraHeaders []string) SessionKey {
	if k, ok := fromHeaders(h, extraHeaders); ok {
		return k
	}
	return withBodyAgent(h, fromFields(f))
}

// withBodyAgent adds the subagent header to a key Claude Code's metadata
// gave (clients older than its session header).
func withBodyAgent(h http.Header, k SessionKey) SessionKey {
	if k.Source != SourceClaudeMetadata {
		return k
	}
	return claudeAgent(h, &oddKeys{h: h}, k)
}

func fromFields(f Fields) SessionKey {
	if !f.Valid {
		return SessionKey{Source: SourceNone}
	}
	return fromBody(f)
}

// fromBody tries the body sources in order.
func fromBody(f Fields) SessionKey {
	if v := claudeMetadata(f.Metadata); v != "" {
		return capKey(v, SourceClaudeMetadata)
	}
	if v := firstString(f.PromptCacheKey, f.PromptCacheKeyCamel); v != "" {
		return capKey(v, SourcePromptCacheKey)
	}
	if v := firstString(f.ClientMetadata.Get("session_id")); v != "" {
		return capKey(v, SourceClientMetadata)
	}
	if v := f.fingerprint(); v != "" {
		return SessionKey{Key: v, Source: SourceFingerprint}
	}
	if v := firstString(f.User, f.SafetyIdentifier); v != "" {
		k := capKey(v, SourceUser)
		k.Key = "user:" + k.Key
		return k
	}
	return SessionKey{Source: SourceNone}
}

// The session headers in the order fromHeaders tries them, each with its
// canonical form computed once (Header.Get would canonicalise, and
// allocate, on every request).
var (
	claudeHeaders   = headerNames("X-Claude-Code-Session-Id")
	codexHeaders    = headerNames("session-id", "session_id")
	opencodeHeaders = headerNames("x-session-affinity", "x-session-id", "x_session_id")
)

// The subagent headers (docs/clients.md, "Subagents").
var (
	claudeAgentHeaders  = headerNames("x-claude-code-agent-id")
	codexThreadHeaders  = headerNames("thread-id", "thread_id")
	codexParentHeaders  = headerNames("x-codex-parent-thread-id")
	opencodeParentHeads = headerNames("x-parent-session-id")
)

func fromHeaders(h http.Header, extra []string) (SessionKey, bool) {
	odd := oddKeys{h: h}
	if v := headerAny(h, &odd, claudeHeaders); v != "" {
		return claudeAgent(h, &odd, capKey(v, SourceClaudeHeader)), true
	}
	if v := headerAny(h, &odd, codexHeaders); v != "" {
		return codexAgent(h, &odd, capKey(v, SourceCodexHeader)), true
	}
	if v := headerAny(h, &odd, opencodeHeaders); v != "" {
		k := capKey(v, SourceOpencode)
		k.Subagent = headerAny(h, &odd, opencodeParentHeads) != ""
		return k, true
	}
	for _, name := range extra {
		if v := headerAny(h, &odd, headerNames(name)); v != "" {
			return capKey(v, SourceCustomHeader), true
		}
	}
	return SessionKey{}, false
}

// claudeAgent adds Claude Code's subagent id to a key from its session id.
func claudeAgent(h http.Header, odd *oddKeys, k SessionKey) SessionKey {
	if a := headerAny(h, odd, claudeAgentHeaders); a != "" {
		k.Agent, k.Subagent = capKey(a, "").Key, true
	}
	return k
}

// codexAgent marks a Codex child: its thread-id differs from the root's
// session-id (the root agent sends both equal), or it names a parent thread.
func codexAgent(h http.Header, odd *oddKeys, k SessionKey) SessionKey {
	t := headerAny(h, odd, codexThreadHeaders)
	if t != "" && (t != k.Key || headerAny(h, odd, codexParentHeaders) != "") {
		k.Agent, k.Subagent = capKey(t, "").Key, true
	}
	return k
}

// bytesView views body as a string without copying, so that gjson results
// point into the body instead of copying large arrays. Nothing derived from
// it may outlive the request: capKey clones what it keeps.
func bytesView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Fields are the top-level body values session identity reads, and those
// the data planes' rewrites need (Stream, StreamOptions, Tools). They point into
// the body they were scanned from: valid while it is unchanged, never
// longer than the request.
type Fields struct {
	Model, System, Instructions, Messages, Input, Metadata gjson.Result
	PromptCacheKey, PromptCacheKeyCamel, ClientMetadata    gjson.Result
	User, SafetyIdentifier                                 gjson.Result
	Stream, StreamOptions                                  gjson.Result
	Tools                                                  gjson.Result
	SessionID                                              gjson.Result // vLLM's session_id (labels its KV events)
	Valid                                                  bool         // the body looked like a JSON object
}

// Scan walks the body's top-level keys once (each value is skipped over,
// not decoded), viewing the body without copying it.
func Scan(body []byte) Fields { return scanFields(bytesView(body)) }

func scanFields(body string) Fields {
	f := Fields{Valid: looksLikeObject(body)}
	if !f.Valid {
		return f
	}
	gjson.Parse(body).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			f.Model = v
		case "session_id":
			f.SessionID = v
		case "system":
			f.System = v
		case "instructions":
			f.Instructions = v
		case "messages":
			f.Messages = v
		case "input":
			f.Input = v
		case "metadata":
			f.Metadata = v
		case "prompt_cache_key":
			f.PromptCacheKey = v
		case "promptCacheKey":
			f.PromptCacheKeyCamel = v
		case "client_metadata":
			f.ClientMetadata = v
		case "user":
			f.User = v
		case "safety_identifier":
			f.SafetyIdentifier = v
		case "stream":
			f.Stream = v
		case "stream_options":
			f.StreamOptions = v
		case "tools":
			f.Tools = v
		}
		return true
	})
	return f
}

// ParsePin reads the X-Warden-Replica request header. ok is false when the
// header is absent; err is set when it is present but not a rank number.
func ParsePin(h http.Header) (rank int, ok bool, err error) {
	v := strings.TrimSpace(h.Get(PinHeader))
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, true, &pinError{value: v}
	}
	return n, true, nil
}

type pinError struct{ value string }

func (e *pinError) Error() string {
	return "X-Warden-Replica must be a replica rank (0, 1, ...), got " + strconv.Quote(e.value)
}

// headerName is a header name as written and in its canonical form.
type headerName struct{ raw, canon string }

func headerNames(names ...string) []headerName {
	out := make([]headerName, len(names))
	for i, n := range names {
		out[i] = headerName{raw: n, canon: textproto.CanonicalMIMEHeaderKey(n)}
	}
	return out
}

// oddKeys says, once asked, whether a header map may hold a session
// header in a spelling the exact lookups miss: a key that is not canonical
// (set by hand) or one with an underscore ("SESSION_ID"). Requests read
// from the wire have neither, and skip the case-insensitive scan; a
// request whose first exact lookup hits never asks.
type oddKeys struct {
	h          http.Header
	known, odd bool
}

func (o *oddKeys) get() bool {
	if !o.known {
		o.known = true
		for k := range o.h {
			if strings.IndexByte(k, '_') >= 0 || textproto.CanonicalMIMEHeaderKey(k) != k { // no allocation when canonical
				o.odd = true
				break
			}
		}
	}
	return o.odd
}

// headerAny returns the first non-empty value among the names, matched
// canonicalised as well as exactly as written: Go canonicalises header
// keys, so "session_id" (arriving as "Session_id") and "session-id" are
// different keys. With odd keys each name is also looked for
// case-insensitively.
func headerAny(h http.Header, odd *oddKeys, names []headerName) string {
	for _, n := range names {
		if vs := h[n.canon]; len(vs) > 0 && vs[0] != "" {
			return strings.TrimSpace(vs[0])
		}
		if vs := h[n.raw]; n.raw != n.canon && len(vs) > 0 && vs[0] != "" { // non-canonical spelling kept as set
			return strings.TrimSpace(vs[0])
		}
		if !odd.get() {
			continue
		}
		for k, vs := range h {
			if len(vs) > 0 && vs[0] != "" && strings.EqualFold(k, n.raw) {
				return strings.TrimSpace(vs[0])
			}
		}
	}
	return ""
}

// claudeMetadata reads metadata.user_id: a JSON string holding session_id
// (Claude Code >= 2.1.78) or the legacy user_<hex>_account_<uuid>_session_<uuid>.
func claudeMetadata(metadata gjson.Result) string {
	uid := metadata.Get("user_id")
	if uid.Type != gjson.String || uid.Str == "" {
		return ""
	}
	s := uid.Str
	if strings.HasPrefix(strings.TrimSpace(s), "{") {
		if v := gjson.Get(s, "session_id"); v.Type == gjson.String {
			return v.Str
		}
		return ""
	}
	if m := legacyClaudeSession.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// looksLikeObject is a cheap guard before body lookups: gjson never fails on
// malformed input, it just finds less; a full validation pass would cost as
// much as the lookups themselves on a large agent body.
func looksLikeObject[T string | []byte](body T) bool {
	for i := range len(body) {
		c := body[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

func firstString(vs ...gjson.Result) string {
	for _, v := range vs {
		if v.Type == gjson.String && v.Str != "" {
			return v.Str
		}
	}
	return ""
}

func capKey(v, source string) SessionKey {
	if len(v) > MaxKeyLen {
		sum := sha256.Sum256([]byte(v))
		v = "h:" + hex.EncodeToString(sum[:16])
	}
	return SessionKey{Key: strings.Clone(v), Source: source}
}

// fingerprint hashes model + system prompt + first user message, for chat
// (messages with system/developer roles), Anthropic (system field) and
// Responses (instructions + input) bodies. It returns "" when there is no
// user message: the system prompt alone is shared by every conversation.
// Claude Code's billing block is skipped so that it cannot split turns.
func fingerprint(body string) string { return scanFields(body).fingerprint() }

func (f Fields) fingerprint() string {
	first := f.firstUserMessage()
	if first == "" {
		return ""
	}
	h := sha256.New()
	io.WriteString(h, f.Model.Str)
	h.Write([]byte{0})
	writeSystem(h, f.System)
	writeSystem(h, f.Instructions)
	f.Messages.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role").Str
		if role == "system" || role == "developer" {
			writeSystem(h, m.Get("content"))
			return true
		}
		return role != "user" // system messages after the first user one are not the prompt's head
	})
	h.Write([]byte{0})
	io.WriteString(h, first)
	return "fp:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// writeSystem writes a system prompt given as a string or as content blocks,
// skipping Claude Code's billing block.
func writeSystem(w io.Writer, v gjson.Result) {
	if v.Type == gjson.String {
		io.WriteString(w, v.Str)
		return
	}
	v.ForEach(func(_, b gjson.Result) bool {
		t := b.Get("text").Str
		if !strings.HasPrefix(t, BillingPrefix) {
			io.WriteString(w, t)
		}
		return true
	})
}

// firstUserMessage returns the raw JSON of the first user message's content
// (chat / Anthropic messages, or Responses input), or "".
func (f Fields) firstUserMessage() string {
	var out string
	find := func(_, m gjson.Result) bool {
		if m.Get("role").Str == "user" {
			out = m.Get("content").Raw
			return false
		}
		return true
	}
	f.Messages.ForEach(find)
	if out != "" {
		return out
	}
	if f.Input.Type == gjson.String {
		return f.Input.Str
	}
	f.Input.ForEach(find)
	return out
}
