package sim

import (
	"strings"

	"github.com/lmwarden/warden/modelinfo"
)

// pyError is a start-up failure that vLLM raises as a Python exception:
// Main prints it as Python's last traceback line, "Class: message" (a
// KeyError's message as Python's repr of the string).
type pyError struct {
	class, msg string
}

func (e *pyError) Error() string { return e.msg }

// line is the exception as the last line of Python's traceback.
func (e *pyError) line() string {
	if e.class == "KeyError" {
		return e.class + ": " + pyRepr(e.msg)
	}
	return e.class + ": " + e.msg
}

// pyRepr is Python's repr of a str: single quotes, or double quotes when
// the string holds a single quote and no double quote; backslashes, the
// chosen quote and control characters escaped.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == q:
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// checkParsers refuses the tool and reasoning parser flags as vLLM 0.32.0
// does, in its order: --enable-auto-tool-choice without --tool-call-parser
// when the argv is parsed (entrypoints/launchers/cli_args.py
// validate_parsed_serve_args), an unregistered tool parser when the API
// server is set up (launcher.py validate_api_server_args; only with
// --enable-auto-tool-choice), an unregistered reasoning parser when the
// engine is built (reasoning/abs_reasoning_parsers.py). A plugin file
// (--tool-parser-plugin, --reasoning-parser-plugin) may register any name,
// so with one the name is not checked.
func (c Config) checkParsers() error {
	if c.AutoToolChoice && c.ToolCallParser == "" {
		return &pyError{"TypeError", "Error: --enable-auto-tool-choice requires --tool-call-parser"}
	}
	if c.AutoToolChoice && c.ToolParserPlugin == "" && !modelinfo.IsToolParser032(c.ToolCallParser) {
		return &pyError{"KeyError", "invalid tool call parser: " + c.ToolCallParser +
			" (chose from { " + strings.Join(modelinfo.ToolParsers032, ",") + " })"}
	}
	if c.ReasoningParser != "" && c.ReasoningParserPlugin == "" && !modelinfo.IsReasoningParser032(c.ReasoningParser) {
		return &pyError{"KeyError", "Reasoning parser '" + c.ReasoningParser + "' not found. Available parsers: " +
			strings.Join(modelinfo.ReasoningParsers032, ", ")}
	}
	return nil
}

// toolParser reports whether vLLM would parse tool calls: it builds its tool
// parser only with both --enable-auto-tool-choice and --tool-call-parser
// (parser/parser_manager.py get_tool_parser), so a parser named without
// the other flag is no parser.
func (c Config) toolParser() bool {
	return c.AutoToolChoice && c.ToolCallParser != ""
}

// knownContexts are the contexts vLLM derives for the models the sim's
// profiles are of, from their config.json (max_position_embeddings), for
// when their files are not on this machine.
var knownContexts = map[string]int{
	"Qwen/Qwen3-4B-Instruct-2507": 262144,
}

// ModelContext is the context vLLM 0.32 serves model at without
// --max-model-len, and where the sim learnt it: the model's own files (a
// local directory or the Hugging Face cache, as vLLM reads them;
// modelinfo.Find), else the sim's table of the models its profiles are of;
// 0 and "" when neither knows the model. Files that cannot be read count as
// not found.
func ModelContext(model string, getenv func(string) string) (int, string) {
	if f, err := modelinfo.Find(model, getenv); err == nil && f.Source != modelinfo.SourceName && f.MaxLen > 0 {
		return f.MaxLen, "config.json in " + f.Dir + " (" + f.Source + ")"
	}
	if n, ok := knownContexts[model]; ok {
		return n, "the simulator's table (its config.json's max_position_embeddings)"
	}
	return 0, ""
}
