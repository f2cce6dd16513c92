package serve

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim"
)

// A misspelt --model under --engine sim is said at start (issue 45); a
// known one, and a real engine's, are not.
func TestSimUnknownModelWarns(t *testing.T) {
	t.Setenv("HF_HOME", t.TempDir()) // no model files on this machine
	t.Setenv("HF_HUB_CACHE", "")
	o := Options{Engine: "sim", SimModelContext: sim.ModelContext}
	o.Model = "Qwen/Qwen3-4B-Instruct-2057"
	if msg := simUnknownModel(o); !strings.Contains(msg, `--model "Qwen/Qwen3-4B-Instruct-2057"`) || !strings.Contains(msg, "misspelt") {
		t.Errorf("a misspelt model: %q", msg)
	}
	o.Model = "Qwen/Qwen3-4B-Instruct-2507"
	if msg := simUnknownModel(o); msg != "" {
		t.Errorf("a known model warned: %q", msg)
	}
	o.Model, o.Engine = "Qwen/Qwen3-4B-Instruct-2057", "vllm"
	if msg := simUnknownModel(o); msg != "" {
		t.Errorf("vLLM (which refuses a wrong name itself) warned: %q", msg)
	}
}
