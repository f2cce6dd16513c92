// Package reqedit holds the edits both data planes make to a request body
// before an engine sees it, so that `warden serve`/`route` (proxy/) and
// `warden epp` (epp/) send the engines the same request: an OpenAI stream
// asked for its usage chunk (the warden accounts it), and Anthropic server
// tools, which vLLM refuses, dropped. Pure functions over the body's bytes
// and identity.Scan's fields; no logging, no state.
package reqedit

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// ToolDrop names the tools of an Anthropic request that vLLM's Anthropic
// endpoint cannot accept: its AnthropicTool model requires input_schema, so
// Anthropic's server tools ({"type":"web_search_20250305","name":
// "web_search"}, the tool-search, code-execution, bash and text-editor tool
// types), which have none, fail the whole request with a 400. The engine
// could not run them anyway: Anthropic's servers execute them. A tool with
// input_schema, or one without a type (a malformed custom tool), is left for
// the engine to judge.
type ToolDrop struct {
	index []int    // positions in "tools", ascending
	kinds []string // their types
	total int      // tools in the request
}

// ServerTools finds the tools to drop. tools is the body's "tools" value
// from identity.Scan; it is read before any edit moves the body's bytes.
func ServerTools(tools gjson.Result) ToolDrop {
	var d ToolDrop
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

// DropTools removes the tools ServerTools found (the whole "tools" key when
// it names only those, so that no empty list is left behind a tool_choice)
// and returns the body and the types it dropped (for the caller's log).
func DropTools(body []byte, d ToolDrop) (out []byte, dropped []string) {
	if len(d.index) == 0 {
		return body, nil
	}
	paths := []string{"tools"}
	if len(d.index) < d.total {
		paths = paths[:0]
		for k := len(d.index) - 1; k >= 0; k-- { // from the end: indices stay valid
			paths = append(paths, "tools."+strconv.Itoa(d.index[k]))
		}
	}
	out = body
	for _, path := range paths {
		b, err := sjson.DeleteBytes(out, path)
		if err != nil {
			return body, nil
		}
		out = b
	}
	return out, d.kinds
}

// includeUsage is the member IncludeUsage adds when the client sent no
// stream_options.
const includeUsage = `"stream_options":{"include_usage":true}`

// IncludeUsage asks an OpenAI stream for its usage chunk: it sets
// stream_options.include_usage to true, byte for byte as
// sjson.SetBytes(body, "stream_options.include_usage", true) does.
// streamOptions is the body's top-level stream_options as identity.Scan
// found it: when the client sent none, the member is spliced in before the
// object's last '}' without scanning the body again (in place when the
// body's buffer has room); otherwise sjson edits it. ok is false when the
// body cannot take it (not a JSON object).
func IncludeUsage(body []byte, streamOptions gjson.Result) (out []byte, ok bool) {
	if !streamOptions.Exists() {
		// sjson's own rule for a key the object lacks: from the first
		// non-space byte up to the last '}', a comma unless the object is
		// empty, the member, and the '}'.
		start := 0
		for start < len(body) && body[start] <= ' ' {
			start++
		}
		end := bytes.LastIndexByte(body, '}')
		if start < len(body) && body[start] == '{' && end > start {
			comma := false
			for _, c := range body[start+1:] {
				if c > ' ' {
					comma = c != '}' && c != ']'
					break
				}
			}
			out = body[start:end]
			if comma {
				out = append(out, ',')
			}
			return append(append(out, includeUsage...), '}'), true
		}
	}
	out, err := sjson.SetBytes(body, "stream_options.include_usage", true)
	return out, err == nil
}
