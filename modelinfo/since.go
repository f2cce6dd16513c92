package modelinfo

// ToolParserSince is the first vLLM release that registers each
// --tool-call-parser name of vLLM 0.32.0, read from the code of every PyPI
// release from 0.6.0 to 0.33.0 (docs/tools.md). glm45 was glm4_moe in
// 0.10.0; qwen3_xml and qwen3_coder, glm45 and glm47, llama3_json and
// llama4_json, hermes and qwen3_json are one implementation each in 0.32.
var ToolParserSince = map[string]string{
	"hermes": "0.6.0", "mistral": "0.6.0",
	"internlm": "0.6.3", "llama3_json": "0.6.3",
	"granite": "0.6.4", "granite-20b-fc": "0.6.4", "jamba": "0.6.4", "pythonic": "0.6.4",
	"phi4_mini_json": "0.8.3", "llama4_json": "0.8.5",
	"deepseek_v3": "0.9.0", "llama4_pythonic": "0.9.0", "xlam": "0.9.2",
	"hunyuan_a13b": "0.10.0", "kimi_k2": "0.10.0", "qwen3_coder": "0.10.0",
	"glm45": "0.10.1", "step3": "0.10.1",
	"deepseek_v31": "0.10.2", "openai": "0.10.2", "seed_oss": "0.10.2",
	"longcat": "0.11.0", "qwen3_xml": "0.11.0",
	"ernie45": "0.11.1", "minimax_m2": "0.11.1", "olmo3": "0.11.1",
	"deepseek_v32": "0.13.0", "gigachat3": "0.13.0",
	"functiongemma": "0.14.0", "glm47": "0.14.0",
	"step3p5": "0.15.1", "granite4": "0.18.0", "gemma4": "0.19.0",
	"deepseek_v4": "0.20.0", "hy_v3": "0.20.0", "mimo": "0.20.0",
	"cohere_command3": "0.21.0", "cohere_command4": "0.21.0", "lfm2": "0.21.0", "poolside_v1": "0.21.0",
	"apertus": "0.22.0", "minicpm5": "0.23.0", "minimax_m3": "0.24.0", "inkling": "0.26.0", "kimi_k3": "0.27.0",
	"dots": "0.28.0", "ling3": "0.28.0", "muse_glimmer": "0.28.0", "hy_v4": "0.29.0",
	"deepseek_v41": "0.30.0", "k2_horizon": "0.30.0",
	"hf": "0.32.0", "plamo3": "0.32.0", "qwen3_json": "0.32.0",
}

// ReasoningParserSince is the first vLLM release that registers each
// --reasoning-parser name of vLLM 0.32.0 (glm45 was glm4_moe in 0.10.0,
// openai_gptoss GptOss in 0.10.1).
var ReasoningParserSince = map[string]string{
	"deepseek_r1": "0.7.1", "granite": "0.8.3", "qwen3": "0.9.0",
	"hunyuan_a13b": "0.10.0", "mistral": "0.10.0",
	"glm45": "0.10.1", "step3": "0.10.1", "openai_gptoss": "0.10.2", "seed_oss": "0.11.0",
	"deepseek_v3": "0.11.1", "ernie45": "0.11.1", "kimi_k2": "0.11.1", "minimax_m2": "0.11.1",
	"minimax_m2_append_think": "0.11.1", "olmo3": "0.11.1",
	"holo2": "0.13.0", "step3p5": "0.15.1", "nemotron_v3": "0.17.1", "gemma4": "0.19.0",
	"deepseek_v4": "0.20.0", "hy_v3": "0.20.0", "mimo": "0.20.0",
	"cohere_command3": "0.21.0", "cohere_command4": "0.21.0", "poolside_v1": "0.21.0",
	"glm47": "0.24.0", "minimax_m3": "0.24.0", "inkling": "0.26.0", "kimi_k3": "0.27.0",
	"ling3": "0.28.0", "muse_glimmer": "0.28.0", "hy_v4": "0.29.0",
	"deepseek_v41": "0.30.0", "k2_horizon": "0.30.0", "granite_thinking_parser": "0.31.0",
	"hf": "0.32.0", "minicpmv": "0.32.0", "plamo3": "0.32.0",
}
