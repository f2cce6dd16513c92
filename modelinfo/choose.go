package modelinfo

import (
	"path"
	"strings"
)

// Parsers is the vLLM tool-call and reasoning parser that fit a model.
type Parsers struct {
	Tool      string // --tool-call-parser; "" when no row knows the model
	Reasoning string // --reasoning-parser; "" when the model does not reason (or vLLM has no parser)
	Family    string // the row that matched, as docs/tools.md names it
	By        string // what decided: "chat template", "config.json" (model type), "name"
}

// Row is one model family of the parser table (docs/tools.md shows it).
type Row struct {
	Family string
	// Tool and Reasoning are the parsers; Reasoning may depend on the
	// model (a thinking variant), so it is a function of what was read.
	Tool      string
	Reasoning func(f Files, name string) string
	// Markers the chat template must all contain (the format of the tool
	// calls the template renders, which the parser reads back); none: the
	// template cannot tell this family.
	Template []string
	// Types are config.json model_type (or text model_type) values, or
	// architectures, of the family.
	Types []string
	// Names are substrings of the lower-cased model name (the last path
	// element of a Hugging Face id or a directory), any one matches.
	Names []string
	// NotNames exclude a row for these name substrings.
	NotNames []string
}

// always returns a fixed reasoning parser.
func always(p string) func(Files, string) string { return func(Files, string) string { return p } }

// thinking returns p for a model that reasons: its name says so (thinking,
// qwq, -r1) or its chat template has a thinking switch or opens a <think>
// block for the answer.
func thinking(p string) func(Files, string) string {
	return func(f Files, name string) string {
		if containsAny(name, "thinking", "qwq", "-r1") {
			return p
		}
		t := f.ChatTemplate
		if strings.Contains(t, "enable_thinking") || strings.Contains(t, "<think>\\n' }}") ||
			strings.Contains(t, "<think>\\n\" }}") || strings.Contains(t, "thinking_mode") {
			return p
		}
		return ""
	}
}

// Table is the parser table, most specific rows first: the first row that
// matches, by template, then name, then config.json, decides.
var Table = []Row{
	{Family: "gpt-oss (harmony)", Tool: "openai", Reasoning: always(""),
		Template: []string{"<|channel|>", "<|call|>"}, Types: []string{"gpt_oss", "GptOssForCausalLM"}, Names: []string{"gpt-oss"}},
	{Family: "Qwen3-Coder, Qwen3.5 (XML tool calls)", Tool: "qwen3_coder", Reasoning: thinking("qwen3"),
		Template: []string{"<tool_call>", "<function="}, Types: []string{"qwen3_5", "qwen3_5_moe", "qwen3_next"},
		Names: []string{"qwen3-coder", "qwen3.5", "qwen3_5"}},
	{Family: "Qwen3, Qwen2.5, QwQ (JSON tool calls)", Tool: "hermes", Reasoning: thinking("qwen3"),
		Template: []string{"<tool_call>", "</tool_call>"}, Types: []string{"qwen3", "qwen3_moe", "qwen2", "qwen2_moe"},
		Names: []string{"qwen3", "qwen2.5", "qwen2", "qwq", "hermes"}},
	{Family: "Llama 4", Tool: "llama4_pythonic", Reasoning: always(""),
		Types: []string{"llama4", "Llama4ForConditionalGeneration"}, Names: []string{"llama-4", "llama4"}},
	{Family: "Llama 3.1, 3.2, 3.3 (JSON tool calls)", Tool: "llama3_json", Reasoning: always(""),
		Template: []string{"<|python_tag|>"}, Names: []string{"llama-3.1", "llama-3.2", "llama-3.3", "llama3.1", "llama3.2", "llama3.3"}},
	{Family: "Mistral, Mixtral, Devstral, Magistral", Tool: "mistral",
		Reasoning: func(_ Files, name string) string {
			if strings.Contains(name, "magistral") {
				return "mistral"
			}
			return ""
		},
		Template: []string{"[TOOL_CALLS]"}, Types: []string{"mistral", "mistral3", "mixtral"},
		Names: []string{"mistral", "mixtral", "devstral", "magistral", "ministral", "codestral"}},
	{Family: "Kimi K2", Tool: "kimi_k2", Reasoning: thinking("kimi_k2"),
		Template: []string{"<|tool_calls_section_begin|>"}, Types: []string{"kimi_k2"}, Names: []string{"kimi-k2", "kimi_k2"}},
	{Family: "DeepSeek-V3.2", Tool: "deepseek_v32", Reasoning: always("deepseek_v3"),
		Types: []string{"deepseek_v32"}, Names: []string{"deepseek-v3.2"}},
	{Family: "DeepSeek-V3.1", Tool: "deepseek_v31", Reasoning: always("deepseek_v3"),
		Names: []string{"deepseek-v3.1"}},
	{Family: "DeepSeek-V3, R1", Tool: "deepseek_v3",
		Reasoning: func(_ Files, name string) string {
			if strings.Contains(name, "-r1") {
				return "deepseek_r1"
			}
			return ""
		},
		Template: []string{"<｜tool▁calls▁begin｜>"}, Types: []string{"deepseek_v3"}, Names: []string{"deepseek-v3", "deepseek-r1"}},
	{Family: "GLM-4.7", Tool: "glm47", Reasoning: always("glm45"),
		Names: []string{"glm-4.7"}},
	{Family: "GLM-4.5, GLM-4.6", Tool: "glm45", Reasoning: always("glm45"),
		Template: []string{"<tool_call>", "<arg_key>"}, Types: []string{"glm4_moe"}, Names: []string{"glm-4.5", "glm-4.6"}},
	{Family: "MiniMax-M2", Tool: "minimax_m2", Reasoning: always("minimax_m2_append_think"),
		Template: []string{"<minimax:tool_call>"}, Types: []string{"minimax_m2"}, Names: []string{"minimax-m2"}},
}

// Choose picks the parsers for model (its name as given) from what Find
// read: the chat template first (it renders earlier tool calls in the
// model's own format, which the parser reads back), then the name, then
// config.json's model type and architectures. ok is false when no row
// matches: the warden then leaves tool calling off and says so.
func Choose(f Files) (Parsers, bool) {
	name := strings.ToLower(path.Base(strings.TrimRight(strings.ReplaceAll(f.Model, "\\", "/"), "/")))
	pick := func(r Row, by string) (Parsers, bool) {
		p := Parsers{Tool: r.Tool, Family: r.Family, By: by}
		if r.Reasoning != nil {
			p.Reasoning = r.Reasoning(f, name)
		}
		return p, true
	}
	if f.ChatTemplate != "" {
		for _, r := range Table {
			if len(r.Template) > 0 && containsAll(f.ChatTemplate, r.Template...) && !containsAny(name, r.NotNames...) {
				return pick(r, "chat template")
			}
		}
	}
	for _, r := range Table {
		if containsAny(name, r.Names...) && !containsAny(name, r.NotNames...) {
			return pick(r, "name")
		}
	}
	types := append([]string{f.ModelType, f.TextModelType}, f.Architectures...)
	for _, r := range Table {
		for _, t := range types {
			if t != "" && contains(r.Types, t) {
				return pick(r, "config.json")
			}
		}
	}
	return Parsers{}, false
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if sub != "" && strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
