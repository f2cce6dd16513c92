// Package enginelogtest holds the engine logs that the tests of enginelog
// and of launch read (testdata/README.md says where each comes from), and
// the cause each must yield: enginelog's tests check its Diagnosis of
// them, launch's the startup error a fake engine that prints them gets.
package enginelogtest

import (
	"embed"
	"strings"
	"testing"
)

//go:embed testdata/*.log
var logs embed.FS

// Fixture is the log name in testdata.
func Fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := logs.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Line is line n (from 1) of text, without a carriage return (vLLM ends
// some lines with CRLF); "" when text has no line n.
func Line(text string, n int) string {
	lines := strings.Split(text, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[n-1], "\r")
}

// Case is a log in testdata and the cause it must yield.
type Case struct {
	Log    string
	Reason string   // the start of the reason; "" for none
	Line   int      // the reason's line in the log
	Hint   []string // parts of the hint; nil for none
}

// Cases are the real failures of vLLM 0.32.0's CPU build (captured by
// hand from `warden serve --device cpu --dp 1`, as realvllm's
// TestFailedStart makes them) and the GPU-like logs, with the cause each
// must yield.
var Cases = []Case{
	{"vllm-0.32-cpu-max-model-len.log", "ValueError: To serve at least one request with the model's max seq len (16384)", 72,
		[]string{"(16384 tokens", "`warden serve ... -- --max-model-len 8160`", "--cpu-kv-cache"}},
	{"vllm-0.32-cpu-no-such-model.log", "huggingface_hub.errors.HFValidationError: Repo id must be in the form", 53,
		[]string{"neither a local folder nor a Hugging Face model name"}},
	{"vllm-0.32-cpu-unknown-flag.log", "vllm: error: unrecognized arguments: --no-such-flag", 6,
		[]string{"check the extra arguments after --"}},
	{"vllm-0.32-cpu-bad-tool-parser.log", "KeyError: 'invalid tool call parser: nope (chose from { apertus,", 38,
		[]string{`no tool-call parser "nope"`, "--tools auto", "apertus, cohere_command3,", "hermes", "qwen3_coder"}},
	{"vllm-0.32-cpu-auto-tool-choice-alone.log", "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser", 13,
		[]string{"needs a --tool-call-parser", "--tools"}},
	{"vllm-0.32-cpu-enginecore-killed.log", "RuntimeError: Engine core initialization failed. See root cause above. " +
		"Failed core proc(s): {'EngineCore': -9}", 80, []string{"EngineCore process was killed by signal 9", "OOM killer"}},
	{"vllm-0.32-cpu-killed-loading.log", "", 0, nil},
	{"vllm-0.32-cpu-offload-refusal.log", "Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs", 30,
		[]string{"--kv-offload off"}},
	{"vllm-0.32-gpu-free-memory.log", "ValueError: Free memory on device cuda:0 (3.12/79.19 GiB) on startup is less than desired", 21,
		[]string{"the GPU is already in use"}},
	{"vllm-0.32-gpu-cuda-oom.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB.", 18,
		[]string{"out of GPU memory", "--max-num-seqs"}},
	{"vllm-0.32-gpu-no-cuda.log", "RuntimeError: No CUDA GPUs are available", 23, []string{"found no usable GPU"}},
}

// MaxLenLine is vLLM's refusal of a context beyond the KV cache, with the
// estimate of the longest that fits (38528).
const MaxLenLine = "(EngineCore_DP0 pid=18799) ERROR 10-08 20:33:48 [core.py:708] ValueError: To serve at least one " +
	"request with the models's max seq len (262144), (36.00 GiB KV cache is needed, which is larger than the " +
	"available KV cache memory (5.62 GiB). Based on the available memory, the estimated maximum model length is " +
	"38528. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."

// Warnings are warnings and INFO lines, some with a hint rule's words,
// none a cause.
var Warnings = strings.Join([]string{
	"(APIServer pid=1) WARNING 12-01 22:35:19 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`.",
	"(Worker pid=3) INFO 12-01 22:36:09 [gpu_worker.py:1034] Free memory on device (22.87/23.52 GiB) on startup. Desired GPU memory utilization is (0.9, 21.17 GiB).",
	"(Worker pid=3) WARNING 12-01 22:36:09 [x.py:1] out of memory once, retrying with a smaller batch",
	"/x/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead",
	"[W1201 22:36:09.406013352 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy (function init_cpu_memory_env)",
	"/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown",
	"  warnings.warn('resource_tracker: There appear to be %d '",
}, "\n") + "\n"
