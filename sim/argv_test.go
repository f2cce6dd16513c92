package sim

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lmwarden/warden/sim/model"
)

func TestParseArgs(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(c *Config)
	}{
		{"vLLM argv as warden passes it",
			[]string{"Qwen/Qwen3-4B", "--host", "127.0.0.1", "--port=8101", "--max-num-seqs", "32",
				"--enable-prompt-tokens-details", "--served-model-name", "qwen", "--max-model-len", "40000",
				"--gpu-memory-utilization=0.9", "--block-size", "16", "--max-num-batched-tokens", "4096",
				"--enable-force-include-usage", "--stream-interval", "4"},
			nil,
			func(c *Config) {
				c.Model, c.Host, c.Port, c.MaxNumSeqs, c.PromptDetails = "Qwen/Qwen3-4B", "127.0.0.1", 8101, 32, true
				c.ServedNames, c.MaxModelLen, c.GPUMemUtil, c.MaxBatchedTokens = []string{"qwen"}, 40000, 0.9, 4096
				c.ForceUsage, c.StreamInterval = true, 4
			}},
		{"unknown flags in every form are accepted and logged",
			[]string{"m", "--trust-remote-code", "--dtype", "bfloat16", "--kv-cache-dtype=fp8", "--enforce-eager", "--port", "1"},
			nil,
			func(c *Config) {
				c.Model, c.ServedNames, c.Port = "m", []string{"m"}, 1
				c.LogUnknown = []string{"--trust-remote-code", "--dtype bfloat16", "--kv-cache-dtype=fp8", "--enforce-eager"}
			}},
		{"vLLM's data parallelism: -dp, and its other flags accepted and logged",
			[]string{"m", "-dp", "2", "--data-parallel-size-local", "2", "--data-parallel-address", "10.0.0.1",
				"--data-parallel-rpc-port", "13345", "--data-parallel-start-rank", "0", "--api-server-count", "1",
				"--data-parallel-backend", "mp"},
			nil,
			func(c *Config) {
				c.Model, c.ServedNames, c.DP = "m", []string{"m"}, 2
				c.LogUnknown = []string{"--data-parallel-size-local 2", "--data-parallel-address 10.0.0.1",
					"--data-parallel-rpc-port 13345", "--data-parallel-start-rank 0", "--api-server-count 1", "--data-parallel-backend mp"}
			}},
		{"--data-parallel-size=N", []string{"m", "--data-parallel-size=3"}, nil,
			func(c *Config) { c.Model, c.ServedNames, c.DP = "m", []string{"m"}, 3 }},
		{"-dp=N", []string{"m", "-dp=4"}, nil,
			func(c *Config) { c.Model, c.ServedNames, c.DP = "m", []string{"m"}, 4 }},
		{"--model instead of a positional, several served names",
			[]string{"--model", "m", "--served-model-name", "a", "b"},
			nil,
			func(c *Config) { c.Model, c.ServedNames = "m", []string{"a", "b"} }},
		{"sim flags from the environment, argv wins",
			[]string{"m", "--sim-time-scale", "10", "--sim-reserve-full-isl=false"},
			map[string]string{"WARDEN_SIM_TIME_SCALE": "5", "WARDEN_SIM_KV_TOKENS": "40000", "WARDEN_SIM_PREFIX_STATS": "lookup"},
			func(c *Config) {
				c.Model, c.ServedNames, c.TimeScale, c.KVTokens, c.PrefixStats = "m", []string{"m"}, 10, 40000, model.StatsLookup
				c.ReserveFullISL = false
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env = tc.env
			got, err := ParseArgs(tc.args, getenv)
			if err != nil {
				t.Fatalf("ParseArgs: %v", err)
			}
			want := DefaultConfig()
			tc.want(&want)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "missing MODEL"},
		{[]string{"m", "--port", "x"}, "--port: not an integer"},
		{[]string{"m", "--max-num-seqs"}, "--max-num-seqs needs a value"},
		{[]string{"m", "--sim-time-scale", "0"}, "--sim-time-scale must be positive"},
		{[]string{"m", "--gpu-memory-utilization", "1.5"}, "gpu-memory-utilization"},
		{[]string{"m", "--sim-profile", "nope"}, "unknown --sim-profile"},
		{[]string{"m", "--sim-prefix-stats", "sometimes"}, "--sim-prefix-stats"},
		{[]string{"m", "--enable-prompt-tokens-details=maybe"}, "not a boolean"},
		{[]string{"m", "--data-parallel-size", "0"}, "--data-parallel-size must be at least 1, got 0"},
		{[]string{"m", "-dp", "two"}, "--data-parallel-size: not an integer"},
	}
	for _, tc := range tests {
		_, err := ParseArgs(tc.args, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) error = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 45872: "45,872", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// --max-model-len takes vLLM 0.32's human-readable integers and auto
// (vllm/utils/argparse_utils.py human_readable_int_or_auto).
func TestMaxModelLenHumanReadable(t *testing.T) {
	for v, want := range map[string]int{"40000": 40000, "1k": 1000, "1K": 1024, "25.6k": 25600, "32k": 32000, "2M": 2 << 20,
		"0.5m": 500000, "auto": -1, "AUTO": -1, "-1": -1, " 8k ": 8000} {
		c, err := ParseArgs([]string{"m", "--max-model-len", v}, noEnv)
		if err != nil || c.MaxModelLen != want {
			t.Errorf("--max-model-len %q: %d, %v; want %d", v, c.MaxModelLen, err, want)
		}
	}
	for v, want := range map[string]string{"1.5K": "Decimals are not allowed with binary suffixes like K. Did you mean to use 1.5k instead?",
		"lots": "not an integer", "-2": "must be positive", "1.5": "not an integer", "k": "not an integer"} {
		if _, err := ParseArgs([]string{"m", "--max-model-len", v}, noEnv); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--max-model-len %q: %v, want an error with %q", v, err, want)
		}
	}
}

// The max_model_len the engine is built with, from --max-model-len and the
// model's context (Config.ModelLen), on the default profile (45,872 KV
// tokens, 45,856 without the null block): a context it cannot hold is
// refused with vLLM's wording unless auto fits it; an unknown model keeps
// the KV capacity.
func TestResolveMaxLen(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		modelLen int
		want     int    // max_model_len in force
		log      string // a start-up line
		err      string
	}{
		{"unknown model: the KV capacity", []string{"demo"}, 0, 45856, "max_model_len defaults to the KV capacity", ""},
		{"the model's context refused", []string{"q"}, 262144, 0, "Using max model len 262144",
			"To serve at least one request with the model's max seq len (262144), (36.00 GiB KV cache is needed, which is larger than the available KV cache memory (6.30 GiB). Based on the available memory, the estimated maximum model length is 45872."},
		{"the model's context fits", []string{"q"}, 32768, 32768, "Using max model len 32768", ""},
		{"explicit beats the model's", []string{"q", "--max-model-len", "16k"}, 262144, 16000, "Using max model len 16000", ""},
		{"auto reduces", []string{"q", "--max-model-len", "auto"}, 262144, 45856,
			"Auto-fit max_model_len: reduced from 262144 to 45872 to fit in available KV cache memory (6.3 GiB GPU)", ""},
		{"-1 keeps a context that fits", []string{"q", "--max-model-len", "-1", "--sim-kv-tokens", "300000"}, 262144, 262144,
			"Auto-fit max_model_len: full model context length 262144 fits in available KV cache memory (41.2 GiB GPU)", ""},
		{"auto, unknown model", []string{"demo", "--max-model-len", "auto"}, 0, 45856, "Auto-fit max_model_len: 45872, the KV capacity", ""},
		{"auto at TP 2", []string{"q", "--max-model-len", "auto", "-tp", "2"}, 262144, 146704,
			"reduced from 262144 to 146720 to fit in available KV cache memory (10.07 GiB GPU)", ""},
	}
	for _, tc := range cases {
		cfg := mustParse(t, tc.args...)
		cfg.ModelLen = tc.modelLen
		var logs bytes.Buffer
		s, err := newServer(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err+" Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine." {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		s.load(context.Background())
		if s.maxLen != tc.want || !strings.Contains(logs.String(), tc.log) {
			t.Errorf("%s: max_model_len %d, want %d; log lacks %q:\n%s", tc.name, s.maxLen, tc.want, tc.log, logs.String())
		}
	}
}

// A model's context comes from its config.json when it is a local directory
// or in the Hugging Face cache, else from the sim's table; names the sim
// does not know have none.
func TestModelContext(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["LlamaForCausalLM"],"max_position_embeddings":16384}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	env := func(k string) string {
		if k == "HF_HUB_CACHE" {
			return empty
		}
		return ""
	}
	for name, want := range map[string]int{dir: 16384, "Qwen/Qwen3-4B-Instruct-2507": 262144, "demo": 0, "test-model": 0, "Qwen/Qwen3-4B": 0} {
		if n, src := ModelContext(name, env); n != want || (n == 0) != (src == "") {
			t.Errorf("ModelContext(%q) = %d (%s), want %d", name, n, src, want)
		}
	}
}

func TestCheckParsers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the traceback line, "" when vLLM starts
	}{
		{[]string{"m", "--tool-call-parser", "bogus"}, ""}, // no check without --enable-auto-tool-choice
		{[]string{"m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"}, ""},
		{[]string{"m", "--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin", "p.py"}, ""},
		{[]string{"m", "--reasoning-parser", "mine", "--reasoning-parser-plugin", "p.py"}, ""},
		{[]string{"m", "--enable-auto-tool-choice"}, "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"},
		{[]string{"m", "--enable-auto-tool-choice", "--tool-call-parser", "x", "--reasoning-parser", "y"}, "KeyError: 'invalid tool call parser: x (chose from { apertus,"},
		{[]string{"m", "--reasoning-parser", "y"}, `KeyError: "Reasoning parser 'y' not found. Available parsers: cohere_command3, cohere_command4,`},
	} {
		err := mustParse(t, tc.args...).checkParsers()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want no error", tc.args, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.(*pyError).line(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
