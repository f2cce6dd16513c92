package enginelog

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/enginelog/enginelogtest"
)

func TestHint(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  string // a part of the hint; "" means no hint
	}{
		{"max model len with an estimate", []string{"noise", enginelogtest.MaxLenLine}, "--max-model-len 38528"},
		{"max model len, older wording", []string{"ValueError: The model's max seq len (262144) is larger than the " +
			"maximum number of tokens that can be stored in KV cache (41824). Try increasing `gpu_memory_utilization` " +
			"or decreasing `max_model_len` when initializing the engine."}, "--max-model-len 41824"},
		{"GPU already in use", []string{"ValueError: Free memory on device (3.1/15.7 GiB) on startup is less than " +
			"desired GPU memory utilization (0.9, 14.1 GiB). Decrease GPU memory utilization or reduce GPU memory " +
			"used by other processes."}, "already in use"},
		{"CUDA OOM", []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}, "out of GPU memory"},
		{"offline", []string{"OSError: We couldn't connect to 'https://huggingface.co' to load the files"}, "could not be downloaded"},
		{"gated", []string{"huggingface_hub.errors.GatedRepoError: 401 Client Error."}, "HF_TOKEN"},
		{"port in use", []string{"OSError: [Errno 98] Address already in use"}, "port 8101 is already in use"},
		{"bad extra arg", []string{"vllm serve: error: unrecognized arguments: --max-modl-len"}, "after --"},
		{"vLLM too old", []string{"vllm serve: error: unrecognized arguments: --enable-prompt-tokens-details"}, "too old"},
		{"no GPU", []string{"RuntimeError: No CUDA GPUs are available"}, "--engine sim"},
		{"image missing (docker 20.10)", []string{"Unable to find image 'vllm/vllm-openai:v9' locally",
			"docker: Error response from daemon: pull access denied for vllm/vllm-openai, repository does not exist."}, "docker pull IMAGE"},
		{"no GPU runtime (docker)", []string{`docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].`},
			"NVIDIA Container Toolkit"},
		{"no GPU runtime (podman CDI)", []string{`Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=0`},
			"nvidia-ctk cdi generate"},
		{"no daemon", []string{"docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"},
			"start it"},
		{"unknown", []string{"Traceback (most recent call last):", "KeyError: 'x'"}, ""},
	}
	for _, tt := range tests {
		got := Hint(tt.lines, 8101)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: Hint() = %q, want it to contain %q", tt.name, got, tt.want)
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
