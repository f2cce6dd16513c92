// Package modelname maps the model names clients send to the one model a
// warden serves, for every data plane: a name other than the served one is
// served by it (its client's own names, Claude Code's, reach the engines as
// the served name), or refused in strict mode as vLLM refuses it. Session
// identity sees the served name on every turn, so that a conversation keeps
// one fingerprint whichever name its client sends. It knows nothing of
// HTTP; the data plane answers a refused name in its API's shape.
package modelname

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// maxNoted bounds the names logged once each.
const maxNoted = 256

// Map is the mapping to one served name, with the names already logged.
// Create it with New; it is safe for concurrent use.
type Map struct {
	served     string // "" = no mapping (the engine's names apply)
	strict     bool
	log        *slog.Logger
	servedJSON []byte // served as a JSON string

	mu    sync.Mutex
	noted map[string]bool
	full  bool // maxNoted reached (and said so)
}

// New is the mapping to served (the one model name; "" = no mapping);
// strict refuses other names as vLLM does.
func New(served string, strict bool, log *slog.Logger) *Map {
	q, _ := json.Marshal(served)
	return &Map{served: served, strict: strict, log: log, noted: map[string]bool{}, servedJSON: q}
}

// Action is what Resolve decided for a request's model field.
type Action int

// What to do with a request's model name.
const (
	Keep    Action = iota // absent, not a string, already the served name, or no served name known
	Rewrite               // another name: serve it with the one model
	Refuse                // another name in strict mode: 404 like vLLM
)

// Resolve decides what to do with the body's top-level "model" value and
// logs, once per distinct name, a name that is mapped or refused.
func (m *Map) Resolve(model gjson.Result) Action {
	if m.served == "" || model.Type != gjson.String || model.Str == "" || model.Str == m.served {
		return Keep
	}
	if m.strict {
		if m.once("refused:" + model.Str) {
			m.log.Warn("model name refused (--strict-model)", "requested", model.Str, "served", m.served)
		}
		return Refuse
	}
	if m.once("mapped:" + model.Str) {
		m.log.Info("model name mapped", "requested", model.Str, "served", m.served)
	}
	return Rewrite
}

// Served is the value session identity sees for a mapped request: the
// served name.
func (m *Map) Served() gjson.Result {
	return gjson.Result{Type: gjson.String, Str: m.served, Raw: strconv.Quote(m.served)}
}

// Rewrite sets the body's top-level "model" to the served name by splicing
// the new value over the old one (gjson stops at the key, which clients
// send first), in place when it is not longer. A body where the splice
// cannot be placed is rewritten by sjson.
func (m *Map) Rewrite(body []byte) []byte {
	v := gjson.GetBytes(body, "model")
	start, end := v.Index, v.Index+len(v.Raw)
	if v.Type != gjson.String || start <= 0 || end > len(body) || body[start] != '"' || body[end-1] != '"' {
		out, err := sjson.SetBytes(body, "model", m.served)
		if err != nil {
			return body
		}
		return out
	}
	val := m.servedJSON
	if grow := len(val) - (end - start); grow <= 0 {
		n := copy(body[start:], val)
		n += copy(body[start+n:], body[end:])
		return body[:start+n]
	}
	out := make([]byte, 0, len(body)+len(val)-(end-start))
	out = append(append(append(out, body[:start]...), val...), body[end:]...)
	return out
}

// once reports whether key is new (and records it). Past maxNoted keys it
// logs one line saying that further ones go unlogged and reports false.
func (m *Map) once(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.noted[key] {
		return false
	}
	if len(m.noted) >= maxNoted {
		if !m.full {
			m.full = true
			m.log.Info("further model names are not logged", "limit", maxNoted)
		}
		return false
	}
	m.noted[key] = true
	return true
}
