package serve

import (
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/hostcpu"
)

// TestCPUPin: --cpu-pin cores confines each CPU rank's processes to its
// cores; threads leaves the affinity mask inherited and binds only vLLM's
// compute threads, as vLLM's own data parallelism does; anything else is
// refused with both choices named.
func TestCPUPin(t *testing.T) {
	d := engineplan.Devices{GPUs: make([][]string, 2), Seqs: 8, KVBytes: 1 << 30, CPUs: []hostcpu.Set{
		{Rank: 0, CPUs: []int{0, 2}, Bind: []int{0}, Nodes: []int{0}},
		{Rank: 1, CPUs: []int{1, 3}, Bind: []int{1}, Nodes: []int{0}},
	}}
	for _, tc := range []struct {
		pin      string
		wantMask bool
	}{{"", true}, {hostcpu.PinCores, true}, {hostcpu.PinThreads, false}} {
		cfg := Options{Model: "m", DP: 2, Engine: "vllm", VLLMPath: "vllm", Device: "cpu", CPUPin: tc.pin, LogDir: t.TempDir()}
		specs, _, err := engineSpecs(cfg, d, engineplan.ToolsChoice{}, engineplan.ContextChoice{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range specs {
			if got := len(s.CPUs) > 0; got != tc.wantMask {
				t.Errorf("--cpu-pin %q rank %d: affinity mask %v, want one: %v", tc.pin, i, s.CPUs, tc.wantMask)
			}
			if tc.wantMask && !slices.Equal(s.CPUs, d.CPUs[i].CPUs) {
				t.Errorf("--cpu-pin %q rank %d: mask %v, want %v", tc.pin, i, s.CPUs, d.CPUs[i].CPUs)
			}
			bind := "VLLM_CPU_OMP_THREADS_BIND=" + hostcpu.FormatList(d.CPUs[i].Bind)
			if !slices.Contains(s.Env, bind) {
				t.Errorf("--cpu-pin %q rank %d: env %v lacks %s", tc.pin, i, s.Env, bind)
			}
		}
	}
	_, err := Options{Model: "m", DP: 2, TP: 1, Engine: "vllm", Device: "cpu", CPUPin: "numa", CPUKVCache: "auto"}.Config()
	if err == nil || !strings.Contains(err.Error(), `--cpu-pin "numa"`) || !strings.Contains(err.Error(), "threads") {
		t.Errorf("--cpu-pin numa: %v", err)
	}
}
