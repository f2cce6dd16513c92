package engineplan

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/modelinfo"
)

func TestChooseContext(t *testing.T) {
	qwen := modelinfo.Files{Model: "Qwen/Qwen3-4B-Instruct-2507", MaxLen: 262144}
	for _, c := range []struct {
		name    string
		extra   []string
		version string
		sim     bool
		want    string
		info    string
	}{
		{"vLLM 0.32: auto", nil, "0.32.0", false, "auto", "own context, 262144 tokens"},
		{"vLLM 0.14.0, the first with auto", nil, "0.14.0", false, "auto", "--max-model-len auto"},
		{"vLLM 0.13: none, said why", nil, "0.13.0", false, "", "vLLM 0.13.0 predates --max-model-len auto (vLLM 0.14.0)"},
		{"an unknown vLLM: none", nil, "", false, "", "the vLLM version is not known"},
		{"the simulator: auto", nil, "", true, "auto", "auto"},
		{"the user's after --", []string{"--max-model-len", "32768"}, "0.32.0", false, "", "32768 (given after --)"},
		{"the user's, = form", []string{"--max-model-len=16k"}, "0.32.0", true, "", "16k"},
		{"the user's, underscores", []string{"--max_model_len", "8192"}, "0.32.0", false, "", "8192"},
	} {
		got := ChooseContext(c.extra, c.version, c.sim, qwen)
		if got.MaxModelLen != c.want || !strings.Contains(got.Info, c.info) {
			t.Errorf("%s: %+v, want %q and %q in the line", c.name, got, c.want, c.info)
		}
	}
	argv := Engine{Kind: "vllm", Model: "m", MaxModelLen: "auto"}.Argv(8000)
	if !strings.Contains(strings.Join(argv, " "), "--enable-prompt-tokens-details --max-model-len auto") {
		t.Errorf("argv %q", argv)
	}
}
