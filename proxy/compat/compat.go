// Package compat lets real agent clients (Claude Code, Codex, opencode) use
// the warden by base URL alone: their model names are mapped to the one
// served model (or refused in strict mode), request fields that vLLM's own
// request models reject are adapted (server tools, Claude Code's billing
// line), and engine answers a client cannot act on are answered from what
// the engine has (Transport: count_tokens, output limits beyond the
// context). It owns only which adaptations were logged; the proxy calls it
// from its request path and wraps its engine transport in Transport. Every adaptation here was checked
// against vLLM's source (vllm/entrypoints/anthropic/protocol.py and
// serving.py, openai tokenization and chat serving); a field the engine
// accepts is never touched, and a request the engine still rejects gets the
// engine's error unchanged.
package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/reqedit"
)

// maxNoted bounds the names and adaptations logged once each.
const maxNoted = 256

// Clients holds the client-compatibility state of a proxy: the served name,
// strict mode, and which mappings and adaptations were already logged.
type Clients struct {
	served string // "" = no mapping (the engine's names apply)
	strict bool
	log    *slog.Logger

	mu    sync.Mutex
	noted map[string]bool
	full  bool // maxNoted reached (and said so)

	servedJSON []byte // served as a JSON string
}

// New is the compatibility state for served (the one model name; "" = no
// mapping); strict refuses other names as vLLM does.
func New(served string, strict bool, log *slog.Logger) *Clients {
	q, _ := json.Marshal(served)
	return &Clients{served: served, strict: strict, log: log, noted: map[string]bool{}, servedJSON: q}
}

// once reports whether key is new (and records it). Past maxNoted keys it
// logs one line saying that further ones go unlogged and reports false.
func (c *Clients) once(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.noted[key] {
		return false
	}
	if len(c.noted) >= maxNoted {
		if !c.full {
			c.full = true
			c.log.Info("further model names and request adaptations are not logged", "limit", maxNoted)
		}
		return false
	}
	c.noted[key] = true
	return true
}

// ModelAction is what ResolveModel decided for a request's model field.
type ModelAction int

// What to do with a request's model name.
const (
	ModelKeep    ModelAction = iota // absent, not a string, already the served name, or no served name known
	ModelRewrite                    // another name: serve it with the one model
	ModelRefuse                     // another name in strict mode: 404 like vLLM
)

// ResolveModel decides what to do with the body's top-level "model" value
// and logs, once per distinct name, a name that is mapped or refused.
func (c *Clients) ResolveModel(model gjson.Result) ModelAction {
	if c.served == "" || model.Type != gjson.String || model.Str == "" || model.Str == c.served {
		return ModelKeep
	}
	if c.strict {
		if c.once("refused:" + model.Str) {
			c.log.Warn("model name refused (--strict-model)", "requested", model.Str, "served", c.served)
		}
		return ModelRefuse
	}
	if c.once("mapped:" + model.Str) {
		c.log.Info("model name mapped", "requested", model.Str, "served", c.served)
	}
	return ModelRewrite
}

// ServedModel is the value session identity sees for a mapped request: the
// served name, so that a conversation keeps one fingerprint whichever name
// its client sends on a turn.
func (c *Clients) ServedModel() gjson.Result {
	return gjson.Result{Type: gjson.String, Str: c.served, Raw: strconv.Quote(c.served)}
}

// RewriteModel sets the body's top-level "model" to the served name by
// splicing the new value over the old one (gjson stops at the key, which
// clients send first), in place when it is not longer. A body where the
// splice cannot be placed is rewritten by sjson.
func (c *Clients) RewriteModel(body []byte) []byte {
	m := gjson.GetBytes(body, "model")
	start, end := m.Index, m.Index+len(m.Raw)
	if m.Type != gjson.String || start <= 0 || end > len(body) || body[start] != '"' || body[end-1] != '"' {
		out, err := sjson.SetBytes(body, "model", c.served)
		if err != nil {
			return body
		}
		return out
	}
	val := c.servedJSON
	if grow := len(val) - (end - start); grow <= 0 {
		n := copy(body[start:], val)
		n += copy(body[start+n:], body[end:])
		return body[:start+n]
	}
	out := make([]byte, 0, len(body)+len(val)-(end-start))
	out = append(append(append(out, body[:start]...), val...), body[end:]...)
	return out
}

// WriteModelNotFound answers a refused model name the way vLLM does: its
// NotFoundError, in the Anthropic error envelope on /v1/messages paths and
// in the OpenAI one elsewhere.
func WriteModelNotFound(w http.ResponseWriter, path, name, served string) {
	msg := fmt.Sprintf("The model `%s` does not exist. This warden serves `%s` (--strict-model refuses other names).", name, served)
	if strings.HasPrefix(path, "/v1/messages") {
		writeJSON(w, http.StatusNotFound, map[string]any{"type": "error",
			"error": map[string]string{"type": "NotFoundError", "message": msg}})
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
		"message": msg, "type": "NotFoundError", "param": "model", "code": http.StatusNotFound}})
}

// ToolDrop names the tools of an Anthropic request that vLLM's Anthropic
// endpoint cannot accept (router/reqedit, shared with the endpoint picker).
type ToolDrop = reqedit.ToolDrop

// ServerTools finds the tools to drop (reqedit.ServerTools).
func ServerTools(tools gjson.Result) ToolDrop { return reqedit.ServerTools(tools) }

// DropTools removes the tools ServerTools found (reqedit.DropTools) and
// logs each tool type once.
func (c *Clients) DropTools(body []byte, d ToolDrop) []byte {
	out, kinds := reqedit.DropTools(body, d)
	for _, k := range kinds {
		if c.once("tool:" + k) {
			c.log.Info("server tool removed from requests (vLLM's Anthropic endpoint needs input_schema; Anthropic runs these tools, the engine cannot)",
				"tool_type", k)
		}
	}
	return out
}

// StripBilling removes a first system block whose text starts with
// "x-anthropic-billing-header:" (Claude Code's per-conversation line, which
// would otherwise defeat prefix sharing of the system prompt behind it).
// system is the body's "system" value from identity.Scan (its Index locates it
// in body). The block is cut out in place (body is the proxy's own buffer),
// from its first byte to the next block's first byte.
func StripBilling(body []byte, system gjson.Result) []byte {
	first := system.Get("0")
	if !strings.HasPrefix(first.Get("text").Str, identity.BillingPrefix) {
		return body
	}
	end := first.Index + len(first.Raw)
	if next := system.Get("1"); next.Index > end {
		end = next.Index
	} else if !bytes.HasPrefix(bytes.TrimLeft(body[min(end, len(body)):], " \t\r\n"), []byte("]")) {
		return body // not a well-formed array: leave it to the engine's 400
	}
	if first.Index <= 0 || end > len(body) || body[first.Index] != '{' {
		out, err := sjson.DeleteBytes(body, "system.0") // position unknown: let sjson do it
		if err != nil {
			return body
		}
		return out
	}
	return append(body[:first.Index], body[end:]...)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// IncludeUsage asks an OpenAI stream for its usage chunk
// (reqedit.IncludeUsage, shared with the endpoint picker).
func IncludeUsage(body []byte, streamOptions gjson.Result) (out []byte, ok bool) {
	return reqedit.IncludeUsage(body, streamOptions)
}
