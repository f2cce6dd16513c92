package modelinfo

// ToolParserSince is the first vLLM release that registers each
// --tool-call-parser name (docs/tools.md has the sources). A name missing
// here is not known to the warden's table of versions.
var ToolParserSince = map[string]string{
	"hermes": "0.6.0", "mistral": "0.6.0", "llama3_json": "0.6.0",
	"openai": "0.10.2", "qwen3_coder": "0.10.0", "kimi_k2": "0.10.0", "glm45": "0.10.0",
	"deepseek_v3": "0.8.3", "deepseek_v31": "0.10.2", "deepseek_v32": "0.11.1", "glm47": "0.14.0",
	"llama4_pythonic": "0.8.3", "minimax_m2": "0.11.1",
}

// ReasoningParserSince is the first vLLM release that registers each
// --reasoning-parser name.
var ReasoningParserSince = map[string]string{
	"qwen3": "0.8.5", "deepseek_r1": "0.7.2", "deepseek_v3": "0.10.2", "glm45": "0.10.0", "kimi_k2": "0.11.1",
	"mistral": "0.10.0", "minimax_m2_append_think": "0.11.1",
}
