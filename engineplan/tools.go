package engineplan

import (
	"fmt"
	"strings"

	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/modelinfo"
)

// Tool calling. Coding agents send tools with tool_choice "auto" on every
// request, and vLLM refuses that unless it was started with
// --enable-auto-tool-choice and a --tool-call-parser that reads the model's
// own tool-call format (vLLM 0.32.0 renderers/online_renderer.py). The
// warden starts its engines ready for agents: ChooseTools picks the parser
// from the model's files (modelinfo.Choose), and a reasoning parser for a
// model that thinks.

// ToolsAuto and ToolsOff are the keywords of --tools and --reasoning.
const (
	ToolsAuto = "auto"
	ToolsOff  = "off"
)

// ToolsRequest is what ChooseTools decides from.
type ToolsRequest struct {
	Tools     string          // --tools: auto, off or a parser name
	Reasoning string          // --reasoning: auto, off or a parser name
	Extra     []string        // the user's args after --
	Files     modelinfo.Files // what modelinfo.Find read
	Version   string          // the engines' vLLM version when known ("" otherwise)
	Sim       bool            // the simulator, which models vLLM 0.32.0
}

// ToolsChoice is the decision: the parsers the warden passes (empty: it
// passes none, because they are off, unknown or given after --), what the
// user is told, and the sentence that says how to turn tool calls on, for
// errors about them.
type ToolsChoice struct {
	ToolParser      string // --enable-auto-tool-choice --tool-call-parser ToolParser; "" none
	ReasoningParser string // --reasoning-parser; "" none
	// FromExtra: the tool flags came after -- and are used as given.
	FromExtra bool
	// Info is one line for the start log; Warn lines are warnings.
	Info string
	Warn []string
	// Fix says how to turn tool calls on with this warden, one sentence; ""
	// when they are on.
	Fix string
}

// Flags are the engine arguments of the choice.
func (c ToolsChoice) Flags() []string {
	var out []string
	if c.ToolParser != "" {
		out = append(out, "--enable-auto-tool-choice", "--tool-call-parser", c.ToolParser)
	}
	if c.ReasoningParser != "" {
		out = append(out, "--reasoning-parser", c.ReasoningParser)
	}
	return out
}

// CheckToolSettings validates --tools and --reasoning before anything
// starts: a keyword or a parser name, and no second setting of the same
// thing after --.
func CheckToolSettings(tools, reasoning string, extra []string) error {
	for _, s := range []struct{ flag, val string }{{"--tools", tools}, {"--reasoning", reasoning}} {
		if strings.TrimSpace(s.val) == "" || strings.ContainsAny(s.val, " \t=") {
			return fmt.Errorf("%s %q: want auto, off or a vLLM parser name (docs/tools.md)", s.flag, s.val)
		}
	}
	toolExtra := argv.Has(extra, "--tool-call-parser") || argv.Has(extra, "--enable-auto-tool-choice")
	if toolExtra && tools != ToolsAuto {
		return fmt.Errorf("--tools %s and -- --tool-call-parser/--enable-auto-tool-choice set tool calling twice: "+
			"use one (--tools PARSER passes both flags)", tools)
	}
	if argv.Has(extra, "--reasoning-parser") && reasoning != ToolsAuto {
		return fmt.Errorf("--reasoning %s and -- --reasoning-parser set the reasoning parser twice: use one", reasoning)
	}
	return nil
}

// ChooseTools decides the tool-call and reasoning parsers of the engines.
func ChooseTools(r ToolsRequest) ToolsChoice {
	var c ToolsChoice
	version := r.Version
	if r.Sim {
		version = "0.32.0"
	}
	picked, known := modelinfo.Choose(r.Files)
	where := describeFiles(r.Files)

	switch {
	case argv.Has(r.Extra, "--tool-call-parser") || argv.Has(r.Extra, "--enable-auto-tool-choice"):
		c.FromExtra = true
		c.Info = "tool calling as given after --"
		if !argv.Has(r.Extra, "--enable-auto-tool-choice") {
			c.Warn = append(c.Warn, "-- --tool-call-parser without --enable-auto-tool-choice: vLLM refuses the "+
				`tool_choice "auto" that coding agents send; add -- --enable-auto-tool-choice, or use --tools PARSER`)
			c.Fix = "add -- --enable-auto-tool-choice to the engines' arguments (or use --tools PARSER instead of the flags after --)"
		}
	case r.Tools == ToolsOff:
		c.Info = "tool calling off (--tools off): vLLM refuses requests with tools, which every coding agent sends"
		c.Fix = "the warden started its engines with --tools off: restart it without that flag (or with --tools PARSER)"
	case r.Tools != ToolsAuto:
		c.ToolParser = r.Tools
		c.Info = fmt.Sprintf("tool calling on: --tool-call-parser %s (--tools)", r.Tools)
		if bad := unknownParser(r.Tools, version, true, r.Extra); bad != "" {
			c.Warn = append(c.Warn, bad)
		}
	case !known:
		c.Info = fmt.Sprintf("tool calling off: the warden does not know the tool-call format of %s %s", r.Files.Model, where)
		c.Warn = append(c.Warn, fmt.Sprintf("tool calls are off: no parser known for %s %s; coding agents' requests "+
			"will be refused; set --tools PARSER with the parser of its tool-call format (docs/tools.md lists them)", r.Files.Model, where))
		c.Fix = "the warden found no tool-call parser for this model: restart it with --tools PARSER (the parser of the " +
			"model's tool-call format; docs/tools.md lists them)"
	default:
		since := modelinfo.ToolParserSince[picked.Tool]
		if old, ok := olderThan(version, since); ok && old {
			c.Info = fmt.Sprintf("tool calling off: %s wants --tool-call-parser %s, which vLLM %s lacks (it came in %s)",
				picked.Family, picked.Tool, version, since)
			c.Warn = append(c.Warn, c.Info+": upgrade vLLM, or set --tools with a parser this vLLM has")
			c.Fix = fmt.Sprintf("this vLLM (%s) lacks the %s parser (since %s): upgrade vLLM or restart the warden with --tools PARSER", version, picked.Tool, since)
		} else {
			c.ToolParser = picked.Tool
			c.Info = fmt.Sprintf("tool calling on: --tool-call-parser %s (%s), chosen from its %s %s", picked.Tool,
				picked.Family, picked.By, where)
		}
	}

	// The reasoning parser.
	switch {
	case argv.Has(r.Extra, "--reasoning-parser"), r.Reasoning == ToolsOff:
	case r.Reasoning != ToolsAuto:
		c.ReasoningParser = r.Reasoning
		if bad := unknownParser(r.Reasoning, version, false, r.Extra); bad != "" {
			c.Warn = append(c.Warn, bad)
		}
	case known && picked.Reasoning != "":
		since := modelinfo.ReasoningParserSince[picked.Reasoning]
		if old, ok := olderThan(version, since); ok && old {
			c.Warn = append(c.Warn, fmt.Sprintf("no reasoning parser: %s wants --reasoning-parser %s, which vLLM %s lacks "+
				"(it came in %s); the model's thinking stays in the answer text", picked.Family, picked.Reasoning, version, since))
		} else {
			c.ReasoningParser = picked.Reasoning
		}
	}
	if c.ReasoningParser != "" {
		c.Info += "; --reasoning-parser " + c.ReasoningParser
	}
	return c
}

// unknownParser warns about a parser name the engines' vLLM (0.32, the
// version whose names the warden knows) does not register; "" when fine or
// not known. A --tool-parser-plugin may register any name.
func unknownParser(name, version string, tool bool, extra []string) string {
	if at, ok := VersionAtLeast(version, 0, 32, 0); !ok || !at {
		return ""
	}
	if next, _ := VersionAtLeast(version, 0, 33, 0); next {
		return ""
	}
	if tool && (argv.Has(extra, "--tool-parser-plugin") || modelinfo.IsToolParser032(name)) {
		return ""
	}
	if !tool && modelinfo.IsReasoningParser032(name) {
		return ""
	}
	kind, list := "tool-call", modelinfo.ToolParsers032
	if !tool {
		kind, list = "reasoning", modelinfo.ReasoningParsers032
	}
	return fmt.Sprintf("vLLM %s has no %s parser %q (it has: %s); the engines will refuse to start", version, kind, name,
		strings.Join(list, ", "))
}

// olderThan reports whether version is older than since; ok is false when
// either is unknown.
func olderThan(version, since string) (old, ok bool) {
	s, ok1 := parseVersion(since)
	if !ok1 || version == "" {
		return false, false
	}
	at, ok2 := VersionAtLeast(version, s[0], s[1], s[2])
	return !at, ok2
}

// describeFiles says where the model's files were read from.
func describeFiles(f modelinfo.Files) string {
	switch f.Source {
	case modelinfo.SourceLocal:
		return "(files in " + f.Dir + ")"
	case modelinfo.SourceCache:
		return "(Hugging Face cache: " + f.Dir + ")"
	default:
		return "(its files are not on this machine yet: only the name was read)"
	}
}
