package modelinfo

import (
	"path"
	"strings"
)

// Parsers is the vLLM tool-call and reasoning parser that fit a model.
type Parsers struct {
	Tool      string // --tool-call-parser; "" when no row knows the model
	Reasoning string // --reasoning-parser; "" when the model does not reason (or needs none)
	Family    string // the row that matched, as docs/tools.md names it
	By        string // what decided: "chat template", "name", "config.json" (model type or architecture)
}

// Row is one model family of the parser table (docs/tools.md shows it).
type Row struct {
	Family string
	Tool   string
	// Reasoning picks the reasoning parser from what was read: a family
	// may have thinking and non-thinking checkpoints, and a thinking parser
	// on a model that does not think moves its whole answer into
	// "reasoning" (vLLM 0.32's qwen3 and kimi_k2 parsers assume thinking
	// unless the request turns it off). nil: none.
	Reasoning func(f Files, name string) string
	// Template markers the chat template must all contain: the format in
	// which it renders earlier tool calls, which is what the parser reads
	// back. None: the template cannot tell this family.
	Template []string
	// Alias: the row's template format is another family's as well (Qwen3's
	// XML is also Step-3.5's and MiMo's); its template markers count only
	// together with its name.
	Alias bool
	// Types are config.json model_type (or text_config model_type) values
	// and architectures of the family.
	Types []string
	// Names are substrings of the lower-cased model name (the last element
	// of a Hugging Face id or a directory); any one matches. A name with a
	// leading "=" matches only the whole name.
	Names []string
}

// none is the reasoning of a family that does not think.
func none(Files, string) string { return "" }

// always returns a fixed reasoning parser.
func always(p string) func(Files, string) string { return func(Files, string) string { return p } }

// Thinks reports whether a model reasons before it answers: its name says
// so (thinking, -think, reasoning), or its chat template opens a <think>
// block for the answer, or has a thinking switch next to <think> (Qwen3's
// hybrid enable_thinking). A template without <think> does not think.
func Thinks(f Files, name string) bool {
	if containsAny(name, "thinking", "-think", "reasoning") {
		return true
	}
	t := f.ChatTemplate
	if !strings.Contains(t, "<think>") {
		return false
	}
	return containsAny(t, "enable_thinking", "thinking is defined", `assistant\n<think>\n`, `<think>\n' }}`, `<think>\n" }}`)
}

// ifThinks returns p for a model that Thinks.
func ifThinks(p string) func(Files, string) string {
	return func(f Files, name string) string {
		if Thinks(f, name) {
			return p
		}
		return ""
	}
}

// Table is the parser table, most specific rows first. Sources: vLLM
// 0.32.0's vllm/tool_parsers and vllm/reasoning (what each parser reads),
// vLLM's tool-calling and reasoning docs and its model recipes (which
// family gets which); docs/tools.md.
var Table = []Row{
	{Family: "gpt-oss (harmony)", Tool: "openai", Reasoning: none, // vLLM sets openai_gptoss itself
		Template: []string{"<|channel|>", "to=functions"}, Types: []string{"gpt_oss", "GptOssForCausalLM"}, Names: []string{"gpt-oss"}},
	{Family: "Seed-OSS", Tool: "seed_oss", Reasoning: none,
		Template: []string{"<seed:tool_call>"}, Types: []string{"seed_oss", "SeedOssForCausalLM"}, Names: []string{"seed-oss"}},
	{Family: "Step-3.5, Step-3.7", Tool: "step3p5", Reasoning: always("step3p5"), Alias: true,
		Template: []string{"<tool_call>", "<function="}, Types: []string{"Step3p5ForCausalLM"}, Names: []string{"step-3.5", "step-3.7", "step3p5"}},
	{Family: "MiMo-V2.5", Tool: "mimo", Reasoning: always("mimo"), Alias: true,
		Template: []string{"<tool_call>", "<function="}, Names: []string{"mimo-v2.5"}},
	{Family: "Qwen3-Coder, Qwen3.5 and later (XML tool calls)", Tool: "qwen3_coder", Reasoning: ifThinks("qwen3"),
		Template: []string{"<function=", "<parameter="},
		Types:    []string{"qwen3_5", "qwen3_5_moe", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"},
		Names:    []string{"qwen3-coder", "qwen3.5", "qwen3.6", "qwen3.8"}},
	{Family: "GLM-4.7, GLM-5", Tool: "glm47", Reasoning: always("glm45"), Alias: true,
		Template: []string{"<tool_call>", "<arg_key>"}, Types: []string{"glm_moe_dsa", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM"},
		Names: []string{"glm-4.7", "glm-5"}},
	{Family: "GLM-4.5, GLM-4.6", Tool: "glm45", Reasoning: always("glm45"),
		Template: []string{"<tool_call>", "<arg_key>"}, Types: []string{"glm4_moe", "Glm4MoeForCausalLM"}, Names: []string{"glm-4.5", "glm-4.6"}},
	{Family: "Granite 4", Tool: "granite4", Reasoning: none, Alias: true,
		Template: []string{"<tool_call>"}, Types: []string{"granitemoehybrid", "GraniteMoeHybridForCausalLM"}, Names: []string{"granite-4"}},
	{Family: "ERNIE 4.5", Tool: "ernie45", Reasoning: ifThinks("ernie45"), Alias: true,
		Template: []string{"<tool_call>"}, Types: []string{"Ernie4_5_MoeForCausalLM"}, Names: []string{"ernie-4.5"}},
	{Family: "Qwen3, Qwen2.5, QwQ, Hermes (JSON tool calls)", Tool: "hermes",
		Reasoning: func(f Files, name string) string {
			if strings.Contains(name, "qwq") {
				return "deepseek_r1" // vLLM's docs for QwQ-32B
			}
			return ifThinks("qwen3")(f, name)
		},
		Template: []string{"<tool_call>", "</tool_call>"},
		Types: []string{"qwen3", "qwen3_moe", "qwen3_next", "qwen2", "qwen2_moe", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
			"Qwen3NextForCausalLM", "Qwen2ForCausalLM"},
		Names: []string{"qwen3", "qwen2.5", "qwq", "hermes-2-pro", "hermes-3"}},
	{Family: "Llama 4", Tool: "llama4_pythonic", Reasoning: none,
		Template: []string{"<|python_start|>"}, Types: []string{"llama4", "Llama4ForConditionalGeneration"}, Names: []string{"llama-4"}},
	{Family: "Llama 3.1, 3.2, 3.3 (JSON tool calls)", Tool: "llama3_json", Reasoning: none,
		Template: []string{"ipython", `"parameters": `},
		Names:    []string{"llama-3.1", "llama-3.2", "llama-3.3", "llama3.1", "llama3.2", "llama3.3"}},
	{Family: "Mistral, Devstral, Magistral, Ministral", Tool: "mistral",
		Reasoning: func(f Files, name string) string {
			if containsAny(name, "magistral", "reasoning") || strings.Contains(f.ChatTemplate, "[THINK]") {
				return "mistral"
			}
			return ""
		},
		Template: []string{"[TOOL_CALLS]"}, Types: []string{"mistral", "mistral3", "mixtral", "Mistral3ForConditionalGeneration", "MistralForCausalLM"},
		Names: []string{"mistral", "mixtral", "devstral", "magistral", "ministral", "codestral"}},
	{Family: "Kimi K3", Tool: "kimi_k3", Reasoning: always("kimi_k3"),
		Template: []string{"<|open|>tools<|sep|>"}, Types: []string{"KimiK3ForConditionalGeneration"}, Names: []string{"kimi-k3"}},
	{Family: "Kimi K2", Tool: "kimi_k2", Reasoning: ifThinks("kimi_k2"),
		Template: []string{"<|tool_calls_section_begin|>"}, Types: []string{"kimi_k2", "KimiK25ForConditionalGeneration"},
		Names: []string{"kimi-k2"}},
	{Family: "DeepSeek-V4.1", Tool: "deepseek_v41", Reasoning: always("deepseek_v41"),
		Template: []string{"｜DSML｜ invoke"}, Types: []string{"DeepseekV41ForCausalLM"}, Names: []string{"deepseek-v4.1"}},
	{Family: "DeepSeek-V4", Tool: "deepseek_v4", Reasoning: always("deepseek_v4"),
		Template: []string{"｜DSML｜tool_calls"}, Types: []string{"DeepseekV4ForCausalLM", "DeepseekV4ForConditionalGeneration"},
		Names: []string{"deepseek-v4"}},
	{Family: "DeepSeek-V3.2", Tool: "deepseek_v32", Reasoning: always("deepseek_v3"),
		Template: []string{"｜DSML｜function_calls"}, Types: []string{"deepseek_v32", "DeepseekV32ForCausalLM"}, Names: []string{"deepseek-v3.2"}},
	{Family: "DeepSeek-V3, R1", Tool: "deepseek_v3",
		Reasoning: func(_ Files, name string) string {
			if strings.Contains(name, "-r1") {
				return "deepseek_r1"
			}
			return "deepseek_v3" // plain text unless a request asks for thinking
		},
		Template: []string{"<｜tool▁calls▁begin｜>", "```json"}, Names: []string{"deepseek-r1", "deepseek-v3-0324", "deepseek-v3-base", "=deepseek-v3"}},
	{Family: "DeepSeek-V3.1", Tool: "deepseek_v31", Reasoning: always("deepseek_v3"),
		Template: []string{"<｜tool▁calls▁begin｜>"}, Types: []string{"deepseek_v3", "DeepseekV3ForCausalLM"}, Names: []string{"deepseek-v3.1"}},
	{Family: "MiniMax-M3", Tool: "minimax_m3", Reasoning: always("minimax_m3"),
		Template: []string{"]<]minimax[>["}, Names: []string{"minimax-m3"}},
	{Family: "MiniMax-M2", Tool: "minimax_m2", Reasoning: always("minimax_m2"),
		Template: []string{"<minimax:tool_call>"}, Types: []string{"minimax_m2", "MiniMaxM2ForCausalLM"}, Names: []string{"minimax-m2"}},
	{Family: "Gemma 4", Tool: "gemma4", Reasoning: ifThinks("gemma4"),
		Template: []string{"<|tool_call>call:"}, Types: []string{"Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"}, Names: []string{"gemma-4"}},
	{Family: "FunctionGemma", Tool: "functiongemma", Reasoning: none,
		Template: []string{"<start_function_call>"}, Names: []string{"functiongemma"}},
	{Family: "Hunyuan-A13B", Tool: "hunyuan_a13b", Reasoning: always("hunyuan_a13b"),
		Types: []string{"HunYuanMoEV1ForCausalLM"}, Names: []string{"hunyuan-a13b"}},
	{Family: "Hy3", Tool: "hy_v3", Reasoning: always("hy_v3"), Types: []string{"HYV3ForCausalLM"}, Names: []string{"hy3"}},
	{Family: "HY v4", Tool: "hy_v4", Reasoning: always("hy_v4"), Types: []string{"HYV4ForCausalLM"}, Names: []string{"hy4", "hy-v4"}},
	{Family: "Granite 3", Tool: "granite", Reasoning: none,
		Template: []string{"<|tool_call|>"}, Types: []string{"granite", "GraniteForCausalLM"}, Names: []string{"granite-3"}},
	{Family: "Granite 20B function calling", Tool: "granite-20b-fc", Reasoning: none,
		Template: []string{"<function_call>"}, Names: []string{"granite-20b-functioncalling"}},
	{Family: "InternLM 2.5, Intern-S1", Tool: "internlm", Reasoning: none,
		Template: []string{"<|action_start|><|plugin|>"}, Types: []string{"InternLM2ForCausalLM"}, Names: []string{"internlm2", "intern-s1"}},
	{Family: "Jamba 1.5", Tool: "jamba", Reasoning: none, Types: []string{"JambaForCausalLM"}, Names: []string{"jamba"}},
	{Family: "Phi-4-mini", Tool: "phi4_mini_json", Reasoning: none, Template: []string{"functools["}, Names: []string{"phi-4-mini"}},
	{Family: "xLAM", Tool: "xlam", Reasoning: none, Names: []string{"xlam"}},
	{Family: "LongCat-Flash", Tool: "longcat", Reasoning: none,
		Template: []string{"<longcat_tool_call>"}, Types: []string{"LongcatFlashForCausalLM"}, Names: []string{"longcat"}},
	{Family: "OLMo 3", Tool: "olmo3", Reasoning: ifThinks("olmo3"),
		Template: []string{"<function_calls>"}, Types: []string{"olmo3", "Olmo3ForCausalLM"}, Names: []string{"olmo-3"}},
	{Family: "GigaChat3", Tool: "gigachat3", Reasoning: none, Names: []string{"gigachat3"}},
	{Family: "LFM2", Tool: "lfm2", Reasoning: none,
		Template: []string{"<|tool_call_start|>"}, Types: []string{"Lfm2ForCausalLM", "Lfm2MoeForCausalLM"}, Names: []string{"lfm2"}},
	{Family: "Apertus", Tool: "apertus", Reasoning: none,
		Template: []string{"<|tools_prefix|>"}, Types: []string{"ApertusForCausalLM"}, Names: []string{"apertus"}},
	{Family: "MiniCPM5", Tool: "minicpm5", Reasoning: none, Names: []string{"minicpm5"}},
	{Family: "dots3", Tool: "dots", Reasoning: none, Template: []string{"<dots_function_call>"}, Names: []string{"dots3"}},
	{Family: "Ling 3", Tool: "ling3", Reasoning: always("ling3"), Types: []string{"BailingMoeV3ForCausalLM"}, Names: []string{"ling-3"}},
	{Family: "poolside Laguna", Tool: "poolside_v1", Reasoning: always("poolside_v1"),
		Types: []string{"LagunaForCausalLM"}, Names: []string{"laguna"}},
	{Family: "Muse-Glimmer", Tool: "muse_glimmer", Reasoning: always("muse_glimmer"),
		Template: []string{"<atem:function_calls>"}, Names: []string{"muse-glimmer"}},
	{Family: "Command A Reasoning", Tool: "cohere_command3", Reasoning: always("cohere_command3"),
		Template: []string{"<|START_ACTION|>"}, Names: []string{"command-a"}},
	{Family: "Inkling", Tool: "inkling", Reasoning: always("inkling"), Types: []string{"InklingForCausalLM"}, Names: []string{"inkling"}},
	{Family: "PLaMo 3", Tool: "plamo3", Reasoning: always("plamo3"),
		Template: []string{"<|plamo:begin_tool_requests:plamo|>"}, Types: []string{"Plamo3ForCausalLM"}, Names: []string{"plamo-3"}},
	{Family: "K2 Horizon", Tool: "k2_horizon", Reasoning: always("k2_horizon"),
		Template: []string{"<ifm|tool_calls>"}, Types: []string{"K2HorizonForCausalLM"}, Names: []string{"k2-horizon"}},
	{Family: "Step3", Tool: "step3", Reasoning: always("step3"),
		Template: []string{"<steptml:invoke"}, Types: []string{"Step3VLForConditionalGeneration", "Step3TextForCausalLM"}, Names: []string{"step3"}},
	{Family: "ToolACE (pythonic tool calls)", Tool: "pythonic", Reasoning: none, Names: []string{"toolace"}},
}

// ResponseTemplateFamily is the row of a checkpoint that declares its own
// output format (tokenizer_config.json response_template), which vLLM
// 0.32's "hf" parsers read: taken when no row of Table matches.
const ResponseTemplateFamily = "a checkpoint with a response_template (vLLM's hf parsers)"

// Choose picks the parsers for the model Find read: the chat template first
// (it renders earlier tool calls in the model's own format, which the parser
// reads back), then the name, then config.json's model type and
// architectures, then a response_template. ok is false when nothing matches:
// the warden then leaves tool calling off and says so.
func Choose(f Files) (Parsers, bool) {
	name := strings.ToLower(path.Base(strings.TrimRight(strings.ReplaceAll(f.Model, "\\", "/"), "/")))
	pick := func(r Row, by string) (Parsers, bool) {
		p := Parsers{Tool: r.Tool, Family: r.Family, By: by}
		if r.Reasoning != nil {
			p.Reasoning = r.Reasoning(f, name)
		}
		return p, true
	}
	templ := func(r Row) bool { return len(r.Template) > 0 && containsAll(f.ChatTemplate, r.Template...) }
	if f.ChatTemplate != "" {
		for _, r := range Table { // the template and the name agree
			if templ(r) && nameMatches(name, r.Names) {
				return pick(r, "chat template")
			}
		}
		for _, r := range Table {
			if templ(r) && !r.Alias {
				return pick(r, "chat template")
			}
		}
	}
	for _, r := range Table {
		if nameMatches(name, r.Names) {
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
	if f.ResponseTemplate {
		return Parsers{Tool: "hf", Family: ResponseTemplateFamily, By: "tokenizer_config.json"}, true
	}
	return Parsers{}, false
}

// nameMatches reports whether name contains one of names ("=x": is x).
func nameMatches(name string, names []string) bool {
	for _, n := range names {
		if exact, ok := strings.CutPrefix(n, "="); ok {
			if name == exact {
				return true
			}
		} else if strings.Contains(name, n) {
			return true
		}
	}
	return false
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
