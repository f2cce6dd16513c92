package modelinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// family is a checkpoint as the warden finds it on disk: its Hugging Face
// id, config.json and the fragment of its chat template that renders an
// earlier tool call (quoted from the published templates; docs/tools.md
// names where each was read).
type family struct {
	id, modelType, arch, template string
	tool, reasoning               string
}

// templateAlone is the parser a family's template gives without its name,
// where the format is also an earlier family's (Table's Alias rows).
var templateAlone = map[string]string{
	"zai-org/GLM-4.7": "glm45", "ibm-granite/granite-4.0-h-small": "hermes", "stepfun-ai/Step-3.5-Flash": "qwen3_coder",
}

var families = []family{
	// Qwen3 hybrid (Qwen/Qwen3-0.6B's template): hermes JSON, a thinking switch.
	{"Qwen/Qwen3-8B", "qwen3", "Qwen3ForCausalLM",
		`{{- '<tool_call>\n{"name": "' }}{{ tool_call.name }}{{- '", "arguments": ' }}{{ tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}` +
			`{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}`,
		"hermes", "qwen3"},
	// Qwen3-4B-Instruct-2507: the same calls, never thinks.
	{"Qwen/Qwen3-4B-Instruct-2507", "qwen3", "Qwen3ForCausalLM",
		`{{- '<tool_call>\n{"name": "' }}{{ tool_call.name }}{{- '", "arguments": ' }}{{- '}\n</tool_call>' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`,
		"hermes", ""},
	// Qwen3-*-Thinking-2507: the answer opens inside <think>.
	{"Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen3_moe", "Qwen3MoeForCausalLM",
		`<tool_call>\n{"name": ...}\n</tool_call>{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\n<think>\n' }}\n{%- endif %}`,
		"hermes", "qwen3"},
	{"Qwen/QwQ-32B", "qwen2", "Qwen2ForCausalLM", `<tool_call>\n{"name": ...}\n</tool_call><think>\n`, "hermes", "deepseek_r1"},
	{"Qwen/Qwen2.5-7B-Instruct", "qwen2", "Qwen2ForCausalLM", `<tool_call>\n{{- tool_call | tojson }}\n</tool_call>`, "hermes", ""},
	// Qwen3-Coder: XML calls, no thinking.
	{"Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_moe", "Qwen3MoeForCausalLM",
		`<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>`,
		"qwen3_coder", ""},
	// Qwen3.5: the same XML, thinking on by default.
	{"Qwen/Qwen3.5-35B-A3B", "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration",
		`<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>{%- if enable_thinking is defined %}<think>\n{%- endif %}`,
		"qwen3_coder", "qwen3"},
	{"openai/gpt-oss-20b", "gpt_oss", "GptOssForCausalLM",
		`<|start|>assistant<|channel|>commentary to=functions.{{ name }} <|constrain|>json<|message|>{{ args }}<|call|>`, "openai", ""},
	// Llama 3.1: JSON with "parameters", results under the ipython role.
	{"meta-llama/Llama-3.1-8B-Instruct", "llama", "LlamaForCausalLM",
		`{{- "Environment: ipython\n" }}{{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}{{- tool_call.arguments | tojson }}`,
		"llama3_json", ""},
	{"meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4", "Llama4ForConditionalGeneration",
		`<|python_start|>[{{ call }}]<|python_end|>`, "llama4_pythonic", ""},
	{"mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistral3", "Mistral3ForConditionalGeneration",
		`[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]{{ calls }}[TOOL_RESULTS]`, "mistral", ""},
	{"mistralai/Magistral-Small-2509", "mistral3", "Mistral3ForConditionalGeneration", `[THINK]{{ r }}[/THINK][TOOL_CALLS]`,
		"mistral", "mistral"},
	// DeepSeek-V3: "function" and a ```json fence; V3.1: the name, then the arguments.
	{"deepseek-ai/DeepSeek-V3-0324", "deepseek_v3", "DeepseekV3ForCausalLM",
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n'",
		"deepseek_v3", "deepseek_v3"},
	{"deepseek-ai/DeepSeek-R1-0528", "deepseek_v3", "DeepseekV3ForCausalLM",
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\\n```json\\n{}\\n```<｜tool▁call▁end｜>", "deepseek_v3", "deepseek_r1"},
	{"deepseek-ai/DeepSeek-V3.1", "deepseek_v3", "DeepseekV3ForCausalLM",
		"'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'",
		"deepseek_v31", "deepseek_v3"},
	{"deepseek-ai/DeepSeek-V3.2", "deepseek_v32", "DeepseekV32ForCausalLM", "", "deepseek_v32", "deepseek_v3"},
	{"zai-org/GLM-4.5-Air", "glm4_moe", "Glm4MoeForCausalLM",
		`[gMASK]<sop>{{ '\n<tool_call>' + tc_obj.name }}<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>`, "glm45", "glm45"},
	{"zai-org/GLM-4.7", "glm4_moe", "Glm4MoeForCausalLM", `<tool_call>{{ tc.name }}<arg_key>{{ k }}</arg_key><arg_value>`, "glm47", "glm45"},
	// Kimi K2: the same architecture as DeepSeek-V3, its own model type.
	{"moonshotai/Kimi-K2-Instruct-0905", "kimi_k2", "DeepseekV3ForCausalLM",
		`<|tool_calls_section_begin|><|tool_call_begin|>{{ id }}<|tool_call_argument_begin|>{{ args }}<|tool_call_end|>`, "kimi_k2", ""},
	{"moonshotai/Kimi-K2-Thinking", "kimi_k2", "DeepseekV3ForCausalLM",
		`<|tool_calls_section_begin|><|tool_call_begin|>{{ formatted_id }}<think>{{rc}}</think>`, "kimi_k2", "kimi_k2"},
	{"MiniMaxAI/MiniMax-M2", "minimax_m2", "MiniMaxM2ForCausalLM",
		`<minimax:tool_call>\n<invoke name="{{ name }}">\n<parameter name="{{ k }}">{{ v }}</parameter>\n</invoke>\n</minimax:tool_call>`,
		"minimax_m2", "minimax_m2"},
	{"ByteDance-Seed/Seed-OSS-36B-Instruct", "seed_oss", "SeedOssForCausalLM",
		`<seed:tool_call><function={{ name }}><parameter={{ k }}>{{ v }}</parameter></function></seed:tool_call>`, "seed_oss", ""},
	{"NousResearch/Hermes-3-Llama-3.1-8B", "llama", "LlamaForCausalLM", `<tool_call>\n{"name": ...}\n</tool_call>`, "hermes", ""},
	{"ibm-granite/granite-4.0-h-small", "granitemoehybrid", "GraniteMoeHybridForCausalLM", `<tool_call>{{ call | tojson }}</tool_call>`,
		"granite4", ""},
	{"google/gemma-4-26B-A4B-it", "gemma4", "Gemma4ForConditionalGeneration", `<|tool_call>call:{{ name }}{key:<|"|>v<|"|>}<tool_call|>`,
		"gemma4", ""},
	{"allenai/Olmo-3-32B-Think", "olmo3", "Olmo3ForCausalLM", `<function_calls>{{ calls }}</function_calls>`, "olmo3", "olmo3"},
	{"LiquidAI/LFM2-1.2B", "lfm2", "Lfm2ForCausalLM", `<|tool_call_start|>[{{ call }}]<|tool_call_end|>`, "lfm2", ""},
	{"stepfun-ai/Step-3.5-Flash", "step3p5", "Step3p5ForCausalLM", `<tool_call>\n<function={{ n }}>\n<parameter={{ k }}>`, "step3p5", "step3p5"},
}

func writeFamily(t *testing.T, f family) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.Base(f.id))
	files := map[string]any{"config.json": map[string]any{"model_type": f.modelType, "architectures": []string{f.arch},
		"max_position_embeddings": 32768}}
	if f.template != "" {
		files["tokenizer_config.json"] = map[string]any{"chat_template": f.template}
	}
	writeModel(t, dir, files)
	return dir
}

// TestChooseOnModelFiles: each family, as its files sit in the Hugging
// Face cache (found by its id), gets vLLM's parsers for it.
func TestChooseOnModelFiles(t *testing.T) {
	for _, f := range families {
		t.Run(f.id, func(t *testing.T) {
			cache := t.TempDir()
			snap := filepath.Join(cache, "models--"+strings.ReplaceAll(f.id, "/", "--"), "snapshots", "abc")
			if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(writeFamily(t, f), snap); err != nil {
				t.Fatal(err)
			}
			files, err := Find(f.id, env(map[string]string{"HF_HUB_CACHE": cache}))
			if err != nil || files.Source != SourceCache {
				t.Fatalf("Find: %+v %v", files, err)
			}
			p, ok := Choose(files)
			if !ok || p.Tool != f.tool || p.Reasoning != f.reasoning {
				t.Errorf("Choose = %+v, want tool %q reasoning %q", p, f.tool, f.reasoning)
			}
			if !IsToolParser032(p.Tool) || (p.Reasoning != "" && !IsReasoningParser032(p.Reasoning)) {
				t.Errorf("%+v: not a parser vLLM 0.32 registers", p)
			}
		})
	}
}

// TestChooseByTemplateAlone: a fine-tune under a name of its own is told by
// its chat template.
func TestChooseByTemplateAlone(t *testing.T) {
	for _, f := range families {
		if f.template == "" {
			continue
		}
		files := Files{Model: "/models/my-finetune", ChatTemplate: f.template}
		p, ok := Choose(files)
		want := f.tool
		if alt, ok := templateAlone[f.id]; ok {
			want = alt
		}
		if !ok || p.Tool != want || p.By != "chat template" {
			t.Errorf("%s's template alone: %+v, want %s by chat template", f.id, p, want)
		}
	}
}

// TestChooseByNameAlone: a model not yet downloaded is known by its name.
func TestChooseByNameAlone(t *testing.T) {
	for _, f := range families {
		p, ok := Choose(Files{Model: f.id, Source: SourceName})
		if !ok || p.Tool != f.tool || p.By != "name" {
			t.Errorf("%s by name: %+v, want %s", f.id, p, f.tool)
		}
	}
}

// TestChooseByConfig: a directory of any name with config.json only.
func TestChooseByConfig(t *testing.T) {
	for _, c := range []struct{ modelType, arch, tool string }{
		{"qwen3", "Qwen3ForCausalLM", "hermes"},
		{"gpt_oss", "GptOssForCausalLM", "openai"},
		{"kimi_k2", "DeepseekV3ForCausalLM", "kimi_k2"},
		{"deepseek_v32", "DeepseekV32ForCausalLM", "deepseek_v32"},
		{"glm4_moe", "Glm4MoeForCausalLM", "glm45"},
		{"mistral", "MistralForCausalLM", "mistral"},
		{"qwen3_5", "Qwen3_5ForConditionalGeneration", "qwen3_coder"},
	} {
		dir := filepath.Join(t.TempDir(), "weights")
		writeModel(t, dir, map[string]any{"config.json": map[string]any{"model_type": c.modelType, "architectures": []string{c.arch}}})
		files, _ := Find(dir, env(nil))
		if p, ok := Choose(files); !ok || p.Tool != c.tool || p.By != "config.json" {
			t.Errorf("%s/%s: %+v, want %s by config.json", c.modelType, c.arch, p, c.tool)
		}
	}
}

// TestChooseTheTinyTestModel reads the real-engine tier's model recipe: its
// template renders hermes-style calls, so the warden picks hermes though its
// config says llama.
func TestChooseTheTinyTestModel(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "scripts", "vllm-cpu", "tiny_model.py"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), `CHAT_TEMPLATE = r"""`)
	end := strings.Index(string(src)[start:], `"""`+"\n\n")
	tmpl := string(src)[start+len(`CHAT_TEMPLATE = r"""`) : start+end]
	p, ok := Choose(Files{Model: "/x/.vllm-cpu/tiny", ModelType: "llama", Architectures: []string{"LlamaForCausalLM"}, ChatTemplate: tmpl})
	if !ok || p.Tool != "hermes" || p.Reasoning != "" || p.By != "chat template" {
		t.Errorf("the tiny model: %+v", p)
	}
}

func TestChooseUnknown(t *testing.T) {
	for _, f := range []Files{
		{Model: "acme/secret-7b"},
		{Model: "/models/x", ModelType: "llama", Architectures: []string{"LlamaForCausalLM"}, ChatTemplate: "{{ messages }}"},
	} {
		if p, ok := Choose(f); ok {
			t.Errorf("%+v: chose %+v, want nothing", f, p)
		}
	}
	if p, ok := Choose(Files{Model: "acme/x", ResponseTemplate: true}); !ok || p.Tool != "hf" {
		t.Errorf("a response_template: %+v", p)
	}
}

// TestTableParsersExist: every parser the table names is one vLLM 0.32
// registers, with the release it came in known.
func TestTableParsersExist(t *testing.T) {
	for _, r := range Table {
		if !IsToolParser032(r.Tool) || ToolParserSince[r.Tool] == "" {
			t.Errorf("%s: tool parser %q unknown (since %q)", r.Family, r.Tool, ToolParserSince[r.Tool])
		}
		for _, name := range []string{"x-thinking", "x"} {
			if p := r.Reasoning(Files{ChatTemplate: "<think> enable_thinking"}, name); p != "" &&
				(!IsReasoningParser032(p) || ReasoningParserSince[p] == "") {
				t.Errorf("%s: reasoning parser %q unknown", r.Family, p)
			}
		}
		if len(r.Names) == 0 {
			t.Errorf("%s: no name to match", r.Family)
		}
	}
	for _, m := range []map[string]string{ToolParserSince} {
		for name := range m {
			if !IsToolParser032(name) {
				t.Errorf("ToolParserSince has %q, which 0.32 lacks", name)
			}
		}
	}
	for name := range ReasoningParserSince {
		if !IsReasoningParser032(name) {
			t.Errorf("ReasoningParserSince has %q, which 0.32 lacks", name)
		}
	}
	if len(ToolParserSince) != len(ToolParsers032) {
		t.Errorf("ToolParserSince knows %d names, 0.32 has %d", len(ToolParserSince), len(ToolParsers032))
	}
}

// TestDocsShowTheTable: docs/tools.md lists every row with its parsers.
func TestDocsShowTheTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "tools.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Table {
		line := ""
		for _, l := range strings.Split(string(doc), "\n") {
			if strings.HasPrefix(l, "| "+r.Family+" |") {
				line = l
			}
		}
		if line == "" || !strings.Contains(line, "`"+r.Tool+"`") {
			t.Errorf("docs/tools.md has no row \"| %s | ... `%s` ...\"", r.Family, r.Tool)
		}
	}
}
