package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf8"

	"github.com/lmwarden/warden/sim/model"
	"github.com/tidwall/gjson"
)

// Tool calling as vLLM 0.32.0 does it. Without a tool parser (which vLLM
// builds only from --enable-auto-tool-choice with --tool-call-parser) chat
// completions and Messages refuse a request whose tool choice is not none
// (renderers/online_renderer.py render_chat); Responses does not check and
// answers in text. With one, a named or required tool choice is a tool
// call: the arguments are built from the tool's parameter schema and the
// output is the call as the sim's chat template renders an assistant tool
// call (toolCall), so that a client sending it back in the next turn hits
// the prefix cache through it. "auto" keeps the sim's text answers.

// Tool choices, as vLLM's ChatCompletionRequest holds them after the API's
// own choice was converted.
const (
	choiceNone     = "none"
	choiceAuto     = "auto"
	choiceRequired = "required"
	choiceNamed    = "named"
)

// toolChoice is what a request asks of the tools: mode "" (none given and
// no tools), one of the choice constants, and the tool's name when named.
type toolChoice struct {
	mode, name string
}

// toolDef is one function tool a request offers: its name and the JSON
// schema of its arguments (parameters, Anthropic's input_schema).
type toolDef struct {
	name   string
	schema gjson.Result
}

// chatToolChoice reads a chat completions request's tool_choice: absent
// with tools is "auto" (protocol.py check_tool_usage); an explicit null
// is none given; a string none / auto / required; an object names
// function.name.
func chatToolChoice(body gjson.Result) toolChoice {
	tc := body.Get("tool_choice")
	switch {
	case !tc.Exists():
		if t := body.Get("tools"); t.IsArray() && len(t.Array()) > 0 {
			return toolChoice{mode: choiceAuto}
		}
	case tc.Type == gjson.String:
		if m := tc.Str; m == choiceNone || m == choiceAuto || m == choiceRequired {
			return toolChoice{mode: m}
		}
	case tc.IsObject():
		return toolChoice{mode: choiceNamed, name: tc.Get("function.name").String()}
	}
	return toolChoice{}
}

// anthropicToolChoice converts a Messages request's tool_choice as vLLM
// 0.32 does (entrypoints/anthropic/serving.py _convert_tool_choice,
// _convert_tools): auto, any (required), none, tool (named); none given
// with tools is auto.
func anthropicToolChoice(body gjson.Result) toolChoice {
	tc := body.Get("tool_choice")
	if !tc.Exists() || tc.Type == gjson.Null {
		if t := body.Get("tools"); t.Exists() && t.Type != gjson.Null {
			return toolChoice{mode: choiceAuto}
		}
		return toolChoice{}
	}
	switch tc.Get("type").String() {
	case "auto":
		return toolChoice{mode: choiceAuto}
	case "any":
		return toolChoice{mode: choiceRequired}
	case "none":
		return toolChoice{mode: choiceNone}
	case "tool":
		return toolChoice{mode: choiceNamed, name: tc.Get("name").String()}
	}
	return toolChoice{}
}

// responsesToolChoice reads a Responses request's tool_choice: a string
// (auto, the default, required, none) or {"type":"function","name":N}.
func responsesToolChoice(body gjson.Result) toolChoice {
	tc := body.Get("tool_choice")
	switch {
	case tc.Type == gjson.String:
		return toolChoice{mode: tc.Str}
	case tc.IsObject() && tc.Get("type").String() == "function":
		return toolChoice{mode: choiceNamed, name: tc.Get("name").String()}
	}
	return toolChoice{mode: choiceAuto}
}

// chatTools lists a chat request's function tools.
func chatTools(body gjson.Result) []toolDef {
	var out []toolDef
	body.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if typ := t.Get("type").String(); typ == "" || typ == "function" {
			out = append(out, toolDef{name: t.Get("function.name").String(), schema: t.Get("function.parameters")})
		}
		return true
	})
	return out
}

// anthropicTools lists a Messages request's client tools (those with an
// input_schema; server tools such as web search have none).
func anthropicTools(body gjson.Result) []toolDef {
	var out []toolDef
	body.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if t.Get("input_schema").Exists() {
			out = append(out, toolDef{name: t.Get("name").String(), schema: t.Get("input_schema")})
		}
		return true
	})
	return out
}

// responsesTools lists a Responses request's function tools.
func responsesTools(body gjson.Result) []toolDef {
	var out []toolDef
	body.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if t.Get("type").String() == "function" {
			out = append(out, toolDef{name: t.Get("name").String(), schema: t.Get("parameters")})
		}
		return true
	})
	return out
}

// toolRefusal is vLLM 0.32's 400 for a tool choice it cannot serve without
// a tool parser, "" when it serves it.
func (s *server) toolRefusal(tc toolChoice) string {
	if s.cfg.toolParser() {
		return ""
	}
	switch tc.mode {
	case choiceAuto:
		if !s.cfg.AutoToolChoice {
			return `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`
		}
	case choiceRequired:
		return `tool_choice="required" requires --tool-call-parser to be set`
	case choiceNamed:
		return `tool_choice=function "` + tc.name + `" requires --tool-call-parser to be set`
	}
	return ""
}

// toolCallOut is the tool call a request's output is.
type toolCallOut struct {
	id     string // chatcmpl-tool-<hex>: the call's id (Responses: call_id)
	itemID string // fc_<hex>: the Responses output item's id
	name   string
	args   string // the arguments, JSON as Python's json.dumps writes it
	// argStart and argEnd are the arguments' byte range in the call's text.
	argStart, argEnd int
}

// argsIn is the part of the arguments within bytes [from, to) of the call's
// text: what a stream sends as the argument delta of the text generated
// there.
func (c *toolCallOut) argsIn(from, to int) string {
	from, to = max(from, c.argStart), min(to, c.argEnd)
	if from >= to {
		return ""
	}
	return c.args[from-c.argStart : to-c.argStart]
}

// forceToolCall makes p's output a call of the tool the choice names
// ("required": the first tool) when the server has a tool parser; else it
// leaves p as it is. The output is the call's rendered text, token by
// token, ending with finish reason stop; when p's limit cuts it, the cut
// text is the answer (finish reason length) and p.call stays nil.
func (s *server) forceToolCall(p *genPlan, tc toolChoice, tools []toolDef) {
	if !s.cfg.toolParser() {
		return
	}
	var def toolDef
	switch tc.mode {
	case choiceNamed:
		def = toolDef{name: tc.name}
		for _, t := range tools {
			if t.name == tc.name {
				def = t
				break
			}
		}
	case choiceRequired:
		if len(tools) == 0 {
			return
		}
		def = tools[0]
	default:
		return
	}
	args := schemaSample(def.schema, 0)
	if !strings.HasPrefix(args, "{") {
		args = "{}"
	}
	text := model.ToolCall(def.name, args)
	start := len(model.ToolCallPrefix(def.name))
	p.forcedIDs, p.forced = model.TokenPieces(text)
	if n := len(p.forcedIDs); n <= p.limit {
		p.maxTokens, p.stopReason = n, "stop"
		p.call = &toolCallOut{id: hexID("chatcmpl-tool-"), itemID: hexID("fc_"), name: def.name, args: args,
			argStart: start, argEnd: start + len(args)}
		return
	}
	p.maxTokens, p.stopReason = p.limit, "length"
}

// hexID is prefix and 16 hex digits, as vLLM's random_uuid()[:16] ids.
func hexID(prefix string) string {
	return fmt.Sprintf("%s%016x", prefix, rand.Uint64())
}

// schemaSample is a deterministic value that JSON schema s admits, as
// Python's json.dumps writes it: enum's first value, const, else by type
// (the first that is not "null" of a list): string "sim", integer and
// number 0, boolean false, array [], null null, object every required
// property (in the order of properties, then the rest of required) filled
// the same way; anyOf / oneOf / allOf take their first schema. A schema
// without a type is an object when it has properties, else null.
func schemaSample(s gjson.Result, depth int) string {
	if depth > 16 || !s.IsObject() {
		return "null"
	}
	if e := s.Get("enum"); e.IsArray() && len(e.Array()) > 0 {
		return pyJSON(e.Array()[0])
	}
	if c := s.Get("const"); c.Exists() {
		return pyJSON(c)
	}
	typ := s.Get("type").String()
	if t := s.Get("type"); t.IsArray() {
		typ = ""
		for _, v := range t.Array() {
			if typ = v.String(); typ != "null" {
				break
			}
		}
	}
	switch typ {
	case "string":
		return `"sim"`
	case "integer", "number":
		return "0"
	case "boolean":
		return "false"
	case "array":
		return "[]"
	case "null":
		return "null"
	case "object":
		return objectSample(s, depth)
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if alt := s.Get(k); alt.IsArray() && len(alt.Array()) > 0 {
			return schemaSample(alt.Array()[0], depth+1)
		}
	}
	if s.Get("properties").Exists() || s.Get("required").Exists() {
		return objectSample(s, depth)
	}
	return "null"
}

func objectSample(s gjson.Result, depth int) string {
	required := map[string]bool{}
	var order []string
	s.Get("required").ForEach(func(_, v gjson.Result) bool {
		if !required[v.String()] {
			required[v.String()] = true
			order = append(order, v.String())
		}
		return true
	})
	var keys []string
	done := map[string]bool{}
	props := s.Get("properties")
	props.ForEach(func(k, _ gjson.Result) bool {
		if required[k.String()] && !done[k.String()] {
			keys, done[k.String()] = append(keys, k.String()), true
		}
		return true
	})
	for _, k := range order {
		if !done[k] {
			keys, done[k] = append(keys, k), true
		}
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var prop gjson.Result
		props.ForEach(func(pk, pv gjson.Result) bool {
			if pk.String() == k {
				prop = pv
				return false
			}
			return true
		})
		parts = append(parts, pyString(k)+": "+schemaSample(prop, depth+1))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// pyJSON writes JSON value v as Python's json.dumps(v, ensure_ascii=False)
// does, which is how vLLM's chat templates (transformers' tojson) render
// tool call arguments: ", " between items, ": " after keys, non-ASCII kept.
// Numbers keep their text.
func pyJSON(v gjson.Result) string {
	switch {
	case v.IsObject():
		var parts []string
		v.ForEach(func(k, x gjson.Result) bool {
			parts = append(parts, pyString(k.String())+": "+pyJSON(x))
			return true
		})
		return "{" + strings.Join(parts, ", ") + "}"
	case v.IsArray():
		var parts []string
		v.ForEach(func(_, x gjson.Result) bool {
			parts = append(parts, pyJSON(x))
			return true
		})
		return "[" + strings.Join(parts, ", ") + "]"
	case v.Type == gjson.String:
		return pyString(v.Str)
	case v.Type == gjson.Number:
		return v.Raw
	case v.Type == gjson.True:
		return "true"
	case v.Type == gjson.False:
		return "false"
	}
	return "null"
}

// pyString is a JSON string as json.dumps(ensure_ascii=False) writes it.
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// renderArgs is a tool call's arguments as vLLM renders them in the
// prompt: it parses a string of JSON into an object
// (renderers/chat_utils.py) and the chat template writes the object with
// tojson (pyJSON). Anthropic's input object goes the same way (vLLM's
// json.dumps, then parsed again). Arguments that are not a JSON object stay
// as they are.
func renderArgs(a gjson.Result) string {
	if a.IsObject() {
		return pyJSON(a)
	}
	if a.Type == gjson.String {
		if v := gjson.Parse(a.Str); gjson.Valid(a.Str) && v.IsObject() {
			return pyJSON(v)
		}
		return a.Str
	}
	return a.Raw
}
