// Package compat lets real agent clients (Claude Code, Codex, opencode) use
// the warden by base URL alone (their model names are mapped by
// router/modelname; a refused name is answered here): request fields that vLLM's own
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
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/reqedit"
)

// maxNoted bounds the adaptations logged once each.
const maxNoted = 256

// Clients holds the client-compatibility state of a proxy: which
// adaptations were already logged.
type Clients struct {
	log *slog.Logger

	mu    sync.Mutex
	noted map[string]bool
	full  bool // maxNoted reached (and said so)
}

// New is the compatibility state, logging to log.
func New(log *slog.Logger) *Clients {
	return &Clients{log: log, noted: map[string]bool{}}
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
			c.log.Info("further request adaptations are not logged", "limit", maxNoted)
		}
		return false
	}
	c.noted[key] = true
	return true
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
