package sim

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
		{"--model instead of a positional, several served names",
			[]string{"--model", "m", "--served-model-name", "a", "b"},
			nil,
			func(c *Config) { c.Model, c.ServedNames = "m", []string{"a", "b"} }},
		{"sim flags from the environment, argv wins",
			[]string{"m", "--sim-time-scale", "10", "--sim-reserve-full-isl=false"},
			map[string]string{"WARDEN_SIM_TIME_SCALE": "5", "WARDEN_SIM_KV_TOKENS": "40000", "WARDEN_SIM_PREFIX_STATS": "lookup"},
			func(c *Config) {
				c.Model, c.ServedNames, c.TimeScale, c.KVTokens, c.PrefixStats = "m", []string{"m"}, 10, 40000, StatsLookup
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
	}
	for _, tc := range tests {
		_, err := ParseArgs(tc.args, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) error = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

func TestKVTokensFormula(t *testing.T) {
	p := Profiles[DefaultProfile]
	// docs/reference-rig.md, KV capacity: util 0.92 -> 43,904 (mns 256) / 45,872 (mns 32)
	tests := []struct {
		util float64
		mns  int
		want int
	}{
		{0.92, 256, 43904},
		{0.92, 32, 45872},
		{0.5, 32, 0},
	}
	for _, tc := range tests {
		if got := p.KVTokens(tc.util, tc.mns, 16); got != tc.want {
			t.Errorf("KVTokens(%v, %d) = %d, want %d", tc.util, tc.mns, got, tc.want)
		}
	}
}

func TestStepSecondsMatchesCalibrationExamples(t *testing.T) {
	p := Profiles[DefaultProfile]
	tests := []struct {
		name string
		cost StepCost
		want float64 // seconds, from docs/reference-rig.md, step time
	}{
		{"B=1 T=1k", StepCost{Decodes: 1, DecodeContext: 1000}, 0.024},
		{"B=1 T=16k", StepCost{Decodes: 1, DecodeContext: 16000}, 0.030},
		{"B=32 T=44k", StepCost{Decodes: 32, DecodeContext: 44000}, 0.046},
		{"2k prefill from 0", StepCost{PrefillTokens: 2048, PrefillPosSum: 2048 * 2047 / 2}, 0.287},
	}
	for _, tc := range tests {
		got := p.StepSeconds(tc.cost)
		if got < tc.want*0.95 || got > tc.want*1.05 {
			t.Errorf("%s: %.4f s, want %.3f s ±5%%", tc.name, got, tc.want)
		}
	}
	half := p
	half.DecodeGBps = 180
	slow := half.StepSeconds(StepCost{Decodes: 1, DecodeContext: 1000})
	if fast := p.StepSeconds(StepCost{Decodes: 1, DecodeContext: 1000}); slow <= fast*1.8 {
		t.Errorf("halving decode bandwidth: %.4f s vs %.4f s, want about double", slow, fast)
	}
}

func TestKVCapacityErrorWording(t *testing.T) {
	err := kvCapacityError(262144, 45872, 147456)
	for _, want := range []string{"max seq len (262144)", "36.00 GiB KV cache is needed", "(6.30 GiB)", "estimated maximum model length is 45872", "`max_model_len`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
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
