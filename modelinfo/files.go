package modelinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Where the files were found.
const (
	SourceLocal = "local directory"
	SourceCache = "Hugging Face cache"
	SourceName  = "name only" // neither a directory nor cached: only the name is known
)

// Files is what the warden read of a model's own files. Zero values mean
// "not known" (Source SourceName: nothing was read).
type Files struct {
	Model  string // as given: a Hugging Face id or a path
	Dir    string // the directory read; "" for SourceName
	Source string

	Architectures []string // config.json "architectures"
	ModelType     string   // config.json "model_type"
	// TextModelType is the language model's type inside a multimodal
	// config ("text_config"); "" when there is none.
	TextModelType string

	// MaxLen is the context vLLM derives from config.json when
	// --max-model-len is not given (DerivedMaxLen); 0 when not known.
	MaxLen int

	// ChatTemplate is the model's own chat template (tokenizer_config.json,
	// chat_template.jinja or chat_template.json); "" when none was found.
	ChatTemplate string
	// ResponseTemplate reports that tokenizer_config.json carries
	// response_template metadata (vLLM's "hf" parsers read it).
	ResponseTemplate bool

	// The KV geometry of the language model, from config.json (0: unknown).
	Layers, KVHeads, HeadDim int
	DType                    string // torch_dtype / dtype

	// WeightBytes is the size of the weight files (*.safetensors, else
	// *.bin); 0 when none is here.
	WeightBytes uint64
}

// KVBytesPerToken is what one token of context takes in a KV cache of the
// model's own dtype: keys and values of every layer and KV head; 0 when the
// geometry is not known.
func (f Files) KVBytesPerToken() uint64 {
	if f.Layers == 0 || f.KVHeads == 0 || f.HeadDim == 0 {
		return 0
	}
	size := uint64(2) // bfloat16, float16, and what vLLM's "auto" serves float32 models at on GPUs
	if strings.Contains(f.DType, "8") {
		size = 1
	}
	return 2 * uint64(f.Layers*f.KVHeads*f.HeadDim) * size
}

// Find reads model's files from the local directory model names, or from the
// Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub
// or ~/.cache/huggingface/hub, as huggingface_hub looks). getenv is
// os.Getenv in production. A model found nowhere is returned with Source
// SourceName and no error: the name is still worth matching. An error means
// files were found but could not be read.
func Find(model string, getenv func(string) string) (Files, error) {
	f := Files{Model: model, Source: SourceName}
	if dir, ok := localDir(model); ok {
		f.Dir, f.Source = dir, SourceLocal
	} else if dir, ok := cachedSnapshot(model, getenv); ok {
		f.Dir, f.Source = dir, SourceCache
	} else {
		return f, nil
	}
	if err := f.read(); err != nil {
		return f, fmt.Errorf("reading the files of %s in %s: %w", model, f.Dir, err)
	}
	return f, nil
}

// localDir reports whether model is a directory with a config.json (or, for
// Mistral's own format, a params.json).
func localDir(model string) (string, bool) {
	for _, name := range []string{"config.json", "params.json"} {
		if st, err := os.Stat(filepath.Join(model, name)); err == nil && !st.IsDir() {
			abs, err := filepath.Abs(model)
			if err != nil {
				abs = model
			}
			return abs, true
		}
	}
	return "", false
}

// HubCache is where huggingface_hub keeps its downloads.
func HubCache(getenv func(string) string) string {
	if d := getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := getenv("HUGGINGFACE_HUB_CACHE"); d != "" {
		return d
	}
	if d := getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// cachedSnapshot finds model's snapshot in the hub cache: the one refs/main
// names, else the most recently changed one that has a config.json.
func cachedSnapshot(model string, getenv func(string) string) (string, bool) {
	if strings.Count(model, "/") != 1 || strings.HasPrefix(model, ".") || strings.HasPrefix(model, "/") {
		return "", false
	}
	repo := filepath.Join(HubCache(getenv), "models--"+strings.ReplaceAll(model, "/", "--"))
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		dir := filepath.Join(repo, "snapshots", strings.TrimSpace(string(ref)))
		if _, ok := localDir(dir); ok {
			return dir, true
		}
	}
	entries, err := os.ReadDir(filepath.Join(repo, "snapshots"))
	if err != nil {
		return "", false
	}
	type snap struct {
		dir string
		mod int64
	}
	var snaps []snap
	for _, e := range entries {
		dir := filepath.Join(repo, "snapshots", e.Name())
		if st, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
			snaps = append(snaps, snap{dir, st.ModTime().UnixNano()})
		}
	}
	if len(snaps) == 0 {
		return "", false
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].mod > snaps[j].mod })
	return snaps[0].dir, true
}

// read fills f from the files in f.Dir.
func (f *Files) read() error {
	cfg, err := readJSON(filepath.Join(f.Dir, "config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tok, err := readJSON(filepath.Join(f.Dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if cfg != nil {
		f.fromConfig(cfg, tok)
	}
	f.ChatTemplate = chatTemplate(f.Dir, tok)
	f.WeightBytes = weightBytes(f.Dir)
	_, f.ResponseTemplate = tok["response_template"].(map[string]any)
	return nil
}

func readJSON(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return m, nil
}

func (f *Files) fromConfig(cfg, tok map[string]any) {
	for _, a := range list(cfg["architectures"]) {
		if s, ok := a.(string); ok {
			f.Architectures = append(f.Architectures, s)
		}
	}
	f.ModelType = str(cfg["model_type"])
	text := cfg
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		text = tc
		f.TextModelType = str(tc["model_type"])
	}
	f.MaxLen = DerivedMaxLen(cfg, text, tok)
	f.Layers = num(text["num_hidden_layers"])
	heads := num(text["num_attention_heads"])
	f.KVHeads = num(text["num_key_value_heads"])
	if f.KVHeads == 0 {
		f.KVHeads = heads
	}
	f.HeadDim = num(text["head_dim"])
	if hidden := num(text["hidden_size"]); f.HeadDim == 0 && heads > 0 {
		f.HeadDim = hidden / heads
	}
	f.DType = str(text["torch_dtype"])
	if f.DType == "" {
		f.DType = str(text["dtype"])
	}
	if f.DType == "" {
		f.DType = str(cfg["torch_dtype"])
	}
}

// weightBytes sums the weight files in dir: safetensors, else PyTorch .bin.
// Stat follows the Hugging Face cache's symlinks to its blobs.
func weightBytes(dir string) uint64 {
	for _, pat := range []string{"*.safetensors", "*.bin"} {
		files, _ := filepath.Glob(filepath.Join(dir, pat))
		var n uint64
		for _, f := range files {
			if st, err := os.Stat(f); err == nil && !st.IsDir() {
				n += uint64(st.Size())
			}
		}
		if n > 0 {
			return n
		}
	}
	return 0
}

// maxLenKeys are the config keys vLLM derives a context from, the smallest
// present winning (vLLM 0.32.0, transformers_utils/
// model_arch_config_convertor.py, derive_max_model_len_and_key).
var maxLenKeys = []string{"max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
	"model_max_length", "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len"}

// ropeFactorIncluded are the RoPE types whose max_position_embeddings is
// already the scaled context (vLLM 0.32.0 config/model.py,
// _get_and_verify_max_len): their factor is not applied again.
var ropeFactorIncluded = map[string]bool{"su": true, "longrope": true, "llama3": true, "yarn": true,
	"deepseek_yarn": true, "deepseek_llama_scaling": true}

// DerivedMaxLen is the context vLLM 0.32.0 serves a model at when
// --max-model-len is not given (config/model.py, _get_and_verify_max_len):
// the smallest of the context keys of the language model's config
// (model_max_length overriding), at most tokenizer_config.json's
// model_max_length, 2048 when none is there, times a RoPE scaling factor
// that the context does not already include; LongRoPE models default to
// their original_max_position_embeddings.
func DerivedMaxLen(cfg, text, tok map[string]any) int {
	derived := math.Inf(1)
	for _, k := range maxLenKeys {
		if v, ok := text[k].(float64); ok {
			derived = math.Min(derived, v)
		}
	}
	if v, ok := text["model_max_length"].(float64); ok && v > 0 {
		derived = v
	}
	if v, ok := tok["model_max_length"].(float64); ok {
		derived = math.Min(derived, v)
	}
	if math.IsInf(derived, 1) {
		derived = 2048
	}
	rope := ropeParams(cfg, text)
	factor := 1.0
	longrope := false
	if len(rope) > 0 && !strings.Contains(str(cfg["model_type"]), "gemma3") {
		for _, rp := range rope {
			typ := str(rp["rope_type"])
			if typ == "" {
				typ = str(rp["type"])
			}
			longrope = longrope || typ == "longrope"
			if !ropeFactorIncluded[typ] {
				if v, ok := rp["factor"].(float64); ok && v > 0 {
					factor = v
				}
			}
		}
		derived *= factor
	}
	if longrope {
		if v, ok := text["original_max_position_embeddings"].(float64); ok && v > 0 {
			return int(v)
		}
	}
	if derived > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(derived)
}

// ropeParams lists the RoPE settings of a config: rope_scaling (older
// transformers) or rope_parameters (newer: one map, or one per layer type).
func ropeParams(cfg, text map[string]any) []map[string]any {
	var out []map[string]any
	for _, m := range []map[string]any{text, cfg} {
		for _, key := range []string{"rope_scaling", "rope_parameters"} {
			rp, ok := m[key].(map[string]any)
			if !ok {
				continue
			}
			if _, flat := rp["rope_type"]; flat || rp["type"] != nil || rp["factor"] != nil {
				out = append(out, rp)
				continue
			}
			for _, v := range rp { // per layer type
				if sub, ok := v.(map[string]any); ok {
					out = append(out, sub)
				}
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return out
}

// chatTemplate finds the model's chat template as transformers does:
// chat_template.jinja, then chat_template.json, then tokenizer_config.json's
// chat_template (a string, or named templates of which "default" or the
// first is taken; "tool_use" is appended, as it renders tool calls).
func chatTemplate(dir string, tok map[string]any) string {
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return string(b)
	}
	if m, err := readJSON(filepath.Join(dir, "chat_template.json")); err == nil {
		if s := str(m["chat_template"]); s != "" {
			return s
		}
	}
	switch t := tok["chat_template"].(type) {
	case string:
		return t
	case []any:
		var def, first, tools string
		for _, e := range t {
			m, _ := e.(map[string]any)
			name, tmpl := str(m["name"]), str(m["template"])
			if first == "" {
				first = tmpl
			}
			switch name {
			case "default":
				def = tmpl
			case "tool_use":
				tools = tmpl
			}
		}
		if def == "" {
			def = first
		}
		if tools != "" && tools != def {
			def += "\n" + tools
		}
		return def
	}
	return ""
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}
