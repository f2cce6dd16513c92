package modelinfo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeModel writes files (name -> content; a map or slice is written as
// JSON) into dir.
func writeModel(t *testing.T, dir string, files map[string]any) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		var b []byte
		if s, ok := v.(string); ok {
			b = []byte(s)
		} else {
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFindLocalDirectory(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, map[string]any{
		"config.json": map[string]any{"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3",
			"max_position_embeddings": 262144, "num_hidden_layers": 36, "num_attention_heads": 32,
			"num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"},
		"tokenizer_config.json": map[string]any{"chat_template": "{% for m in messages %}<tool_call>{% endfor %}"},
	})
	f, err := Find(dir, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if f.Source != SourceLocal || f.Dir != dir || f.ModelType != "qwen3" || len(f.Architectures) != 1 ||
		f.MaxLen != 262144 || f.Layers != 36 || f.KVHeads != 8 || f.HeadDim != 128 || f.DType != "bfloat16" ||
		f.ChatTemplate == "" {
		t.Errorf("Find: %+v", f)
	}
}

func TestFindHubCache(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "models--Qwen--Qwen3-4B-Instruct-2507")
	writeModel(t, filepath.Join(repo, "snapshots", "old"), map[string]any{"config.json": map[string]any{"model_type": "old"}})
	writeModel(t, filepath.Join(repo, "snapshots", "abc123"), map[string]any{
		"config.json":         map[string]any{"model_type": "qwen3"},
		"chat_template.jinja": "jinja template",
	})
	writeModel(t, filepath.Join(repo, "refs"), map[string]any{"main": "abc123\n"})
	for _, e := range []map[string]string{{"HF_HUB_CACHE": cache}, {"HF_HOME": filepath.Dir(cache)}} {
		if e["HF_HOME"] != "" { // HF_HOME/hub
			if err := os.Rename(cache, filepath.Join(e["HF_HOME"], "hub")); err != nil {
				t.Fatal(err)
			}
		}
		f, err := Find("Qwen/Qwen3-4B-Instruct-2507", env(e))
		if err != nil {
			t.Fatal(err)
		}
		if f.Source != SourceCache || f.ModelType != "qwen3" || f.ChatTemplate != "jinja template" {
			t.Errorf("env %v: %+v", e, f)
		}
	}
	cache = filepath.Join(filepath.Dir(cache), "hub")
	// Without refs/main, the newest snapshot with a config.json.
	repo = filepath.Join(cache, "models--Qwen--Qwen3-4B-Instruct-2507")
	if err := os.Remove(filepath.Join(repo, "refs", "main")); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(repo, "snapshots", "old", "config.json"), past, past); err != nil {
		t.Fatal(err)
	}
	if f, _ := Find("Qwen/Qwen3-4B-Instruct-2507", env(map[string]string{"HF_HUB_CACHE": cache})); f.ModelType != "qwen3" {
		t.Errorf("without refs/main: %+v, want the newest snapshot", f)
	}
	if f, _ := Find("Other/Model", env(map[string]string{"HF_HUB_CACHE": cache})); f.Source != SourceName || f.Dir != "" {
		t.Errorf("an uncached model: %+v", f)
	}
}

func TestFindNameOnly(t *testing.T) {
	f, err := Find("meta-llama/Llama-3.1-8B-Instruct", env(map[string]string{"HF_HUB_CACHE": t.TempDir()}))
	if err != nil || f.Source != SourceName || f.Model != "meta-llama/Llama-3.1-8B-Instruct" {
		t.Errorf("Find = %+v, %v", f, err)
	}
}

func TestFindBrokenConfigIsAnError(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, map[string]any{"config.json": "{not json"})
	if _, err := Find(dir, env(nil)); err == nil {
		t.Error("a config.json that is not JSON: no error")
	}
}

func TestChatTemplateNamedTemplates(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, map[string]any{
		"config.json": map[string]any{"model_type": "x"},
		"tokenizer_config.json": map[string]any{"chat_template": []map[string]string{
			{"name": "default", "template": "DEFAULT"}, {"name": "tool_use", "template": "TOOLS"}}},
	})
	f, _ := Find(dir, env(nil))
	if f.ChatTemplate != "DEFAULT\nTOOLS" {
		t.Errorf("template %q, want the default and the tool_use template", f.ChatTemplate)
	}
}

func TestDerivedMaxLen(t *testing.T) {
	for _, c := range []struct {
		name     string
		cfg, tok map[string]any
		want     int
	}{
		{"max_position_embeddings", map[string]any{"max_position_embeddings": 262144.0}, nil, 262144},
		{"none: vLLM's 2048", map[string]any{}, nil, 2048},
		{"the smallest key", map[string]any{"max_position_embeddings": 8192.0, "seq_length": 4096.0}, nil, 4096},
		{"tokenizer's model_max_length caps", map[string]any{"max_position_embeddings": 32768.0},
			map[string]any{"model_max_length": 16384.0}, 16384},
		{"linear RoPE factor applies", map[string]any{"max_position_embeddings": 4096.0,
			"rope_scaling": map[string]any{"rope_type": "linear", "factor": 4.0}}, nil, 16384},
		{"YaRN already scaled", map[string]any{"max_position_embeddings": 131072.0,
			"rope_scaling": map[string]any{"type": "yarn", "factor": 4.0}}, nil, 131072},
		{"llama3 already scaled", map[string]any{"max_position_embeddings": 131072.0,
			"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0}}, nil, 131072},
		{"LongRoPE: the original", map[string]any{"max_position_embeddings": 131072.0, "original_max_position_embeddings": 4096.0,
			"rope_scaling": map[string]any{"type": "longrope"}}, nil, 4096},
		{"default rope", map[string]any{"max_position_embeddings": 16384.0,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0}}, nil, 16384},
	} {
		if got := DerivedMaxLen(c.cfg, c.cfg, c.tok); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestWeightsAndKVBytes(t *testing.T) {
	dir := t.TempDir()
	writeModel(t, dir, map[string]any{
		"config.json": map[string]any{"model_type": "qwen3", "num_hidden_layers": 36, "num_attention_heads": 32,
			"num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"},
		"model-00001-of-00002.safetensors": strings.Repeat("x", 1000),
		"model-00002-of-00002.safetensors": strings.Repeat("x", 500),
		"training_args.bin":                strings.Repeat("x", 99),
	})
	f, err := Find(dir, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3-4B: 36 layers x 8 KV heads x 128 x K and V x 2 bytes = 144 KiB.
	if f.WeightBytes != 1500 || f.KVBytesPerToken() != 147456 {
		t.Errorf("weights %d (want 1500: safetensors only), KV bytes a token %d (want 147456)", f.WeightBytes, f.KVBytesPerToken())
	}
	if (Files{}).KVBytesPerToken() != 0 {
		t.Error("an unknown geometry has a KV size")
	}
}
