package modelinfo

// ToolParsers032 are the --tool-call-parser names vLLM 0.32.0 registers
// (vllm/tool_parsers/__init__.py, _TOOL_PARSERS_TO_REGISTER), sorted as
// ToolParserManager.list_registered() returns them, which is the order of
// vLLM's own refusal of an unknown name.
var ToolParsers032 = []string{
	"apertus", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31", "deepseek_v32",
	"deepseek_v4", "deepseek_v41", "dots", "ernie45", "functiongemma", "gemma4", "gigachat3", "glm45",
	"glm47", "granite", "granite-20b-fc", "granite4", "hermes", "hf", "hunyuan_a13b", "hy_v3", "hy_v4",
	"inkling", "internlm", "jamba", "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3_json",
	"llama4_json", "llama4_pythonic", "longcat", "mimo", "minicpm5", "minimax_m2", "minimax_m3",
	"mistral", "muse_glimmer", "olmo3", "openai", "phi4_mini_json", "plamo3", "poolside_v1", "pythonic",
	"qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3", "step3p5", "xlam",
}

// ReasoningParsers032 are the --reasoning-parser names vLLM 0.32.0
// registers (vllm/reasoning/__init__.py), sorted as its refusal of an
// unknown name lists them.
var ReasoningParsers032 = []string{
	"cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41",
	"ernie45", "gemma4", "glm45", "glm47", "granite", "granite_thinking_parser", "hf", "holo2",
	"hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "k2_horizon", "kimi_k2", "kimi_k3", "ling3", "mimo",
	"minicpmv", "minimax_m2", "minimax_m2_append_think", "minimax_m3", "mistral", "muse_glimmer",
	"nemotron_v3", "olmo3", "openai_gptoss", "plamo3", "poolside_v1", "qwen3", "seed_oss", "step3",
	"step3p5",
}

// IsToolParser032 reports whether vLLM 0.32.0 registers name as a tool
// parser.
func IsToolParser032(name string) bool { return contains(ToolParsers032, name) }

// IsReasoningParser032 reports whether vLLM 0.32.0 registers name as a
// reasoning parser.
func IsReasoningParser032(name string) bool { return contains(ReasoningParsers032, name) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
