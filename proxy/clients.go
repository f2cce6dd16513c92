package proxy

// Real agent clients (Claude Code, Codex, opencode) through the warden by
// base URL alone: their model names are mapped to the one served model (or
// refused in strict mode), request fields that vLLM's own request models
// reject are adapted, and side requests the engine lacks are answered from
// what it has (clients_fallback.go). Every adaptation here was checked
// against vLLM's source (vllm/entrypoints/anthropic/protocol.py and
// serving.py, openai tokenization and chat serving); a field the engine
// accepts is never touched, and a request the engine still rejects gets the
// engine's error unchanged.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// maxNoted bounds the names and adaptations logged once each.
const maxNoted = 256

// clients holds the client-compatibility state of a proxy: the served name,
// strict mode, and which mappings and adaptations were already logged.
type clients struct {
	served string // "" = no mapping (the engine's names apply)
	strict bool
	log    *slog.Logger

	mu    sync.Mutex
	noted map[string]bool
	full  bool // maxNoted reached (and said so)

	servedJSON []byte // served as a JSON string
}

func newClients(served string, strict bool, log *slog.Logger) *clients {
	q, _ := json.Marshal(served)
	return &clients{served: served, strict: strict, log: log, noted: map[string]bool{}, servedJSON: q}
}

// once reports whether key is new (and records it). Past maxNoted keys it
// logs one line saying that further ones go unlogged and reports false.
func (c *clients) once(key string) bool {
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

// modelAction is what resolveModel decided for a request's model field.
type modelAction int

const (
	modelKeep    modelAction = iota // absent, not a string, already the served name, or no served name known
	modelRewrite                    // another name: serve it with the one model
	modelRefuse                     // another name in strict mode: 404 like vLLM
)

// resolveModel decides what to do with the body's top-level "model" value
// and logs, once per distinct name, a name that is mapped or refused.
func (c *clients) resolveModel(model gjson.Result) modelAction {
	if c.served == "" || model.Type != gjson.String || model.Str == "" || model.Str == c.served {
		return modelKeep
	}
	if c.strict {
		if c.once("refused:" + model.Str) {
			c.log.Warn("model name refused (--strict-model)", "requested", model.Str, "served", c.served)
		}
		return modelRefuse
	}
	if c.once("mapped:" + model.Str) {
		c.log.Info("model name mapped", "requested", model.Str, "served", c.served)
	}
	return modelRewrite
}

// servedModel is the value session identity sees for a mapped request: the
// served name, so that a conversation keeps one fingerprint whichever name
// its client sends on a turn.
func (c *clients) servedModel() gjson.Result {
	return gjson.Result{Type: gjson.String, Str: c.served, Raw: strconv.Quote(c.served)}
}

// rewriteModel sets the body's top-level "model" to the served name by
// splicing the new value over the old one (gjson stops at the key, which
// clients send first), in place when it is not longer. A body where the
// splice cannot be placed is rewritten by sjson.
func (c *clients) rewriteModel(body []byte) []byte {
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

// writeModelNotFound answers a refused model name the way vLLM does: its
// NotFoundError, in the Anthropic error envelope on /v1/messages paths and
// in the OpenAI one elsewhere.
func writeModelNotFound(w http.ResponseWriter, path, name string) {
	msg := fmt.Sprintf("The model `%s` does not exist.", name)
	if strings.HasPrefix(path, "/v1/messages") {
		writeJSON(w, http.StatusNotFound, map[string]any{"type": "error",
			"error": map[string]string{"type": "NotFoundError", "message": msg}})
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
		"message": msg, "type": "NotFoundError", "param": "model", "code": http.StatusNotFound}})
}

// toolDrop names the tools of an Anthropic request that vLLM's Anthropic
// endpoint cannot accept: its AnthropicTool model requires input_schema, so
// Anthropic's server tools ({"type":"web_search_20250305","name":
// "web_search"}, the tool-search, code-execution, bash and text-editor tool
// types), which have none, fail the whole request with a 400. The engine
// could not run them anyway: Anthropic's servers execute them. A tool with
// input_schema, or one without a type (a malformed custom tool), is left for
// the engine to judge.
type toolDrop struct {
	index []int    // positions in "tools", ascending
	kinds []string // their types
	total int      // tools in the request
}

// serverTools finds the tools to drop. tools is the body's "tools" value
// from scanFields; it is read before any edit moves the body's bytes.
func serverTools(tools gjson.Result) toolDrop {
	var d toolDrop
	tools.ForEach(func(_, t gjson.Result) bool {
		typ := t.Get("type").Str
		if typ != "" && typ != "custom" && !t.Get("input_schema").Exists() {
			d.index = append(d.index, d.total)
			d.kinds = append(d.kinds, strings.Clone(typ))
		}
		d.total++
		return true
	})
	return d
}

// dropTools removes the tools serverTools found (the whole "tools" key when
// it names only those, so that no empty list is left behind a tool_choice)
// and logs each tool type once.
func (c *clients) dropTools(body []byte, d toolDrop) []byte {
	if len(d.index) == 0 {
		return body
	}
	paths := []string{"tools"}
	if len(d.index) < d.total {
		paths = paths[:0]
		for k := len(d.index) - 1; k >= 0; k-- { // from the end: indices stay valid
			paths = append(paths, "tools."+strconv.Itoa(d.index[k]))
		}
	}
	out := body
	for _, path := range paths {
		b, err := sjson.DeleteBytes(out, path)
		if err != nil {
			return body
		}
		out = b
	}
	for _, k := range d.kinds {
		if c.once("tool:" + k) {
			c.log.Info("server tool removed from requests (vLLM's Anthropic endpoint needs input_schema; Anthropic runs these tools, the engine cannot)",
				"tool_type", k)
		}
	}
	return out
}
