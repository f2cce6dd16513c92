package launch

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// StartupError is why a rank did not become healthy during Start. Its
// Error() is the user-facing message: rank, cause, the rank's last log lines
// and a hint naming what to check.
type StartupError struct {
	Rank      int
	Port      int
	Where     string   // what the rank runs on: "GPU 0", "CPU 0-3"; empty for the simulator
	Cause     string   // "exited with status 1", "not healthy after 10m0s", "canceled", "cannot start: ..."
	Hint      string   // what to check; "" when the cause is not a known one
	LastLines []string // the rank's last output lines, oldest first
	LogPath   string
}

// Error renders the whole report, several lines long.
func (e *StartupError) Error() string {
	var b strings.Builder
	where := fmt.Sprintf("port %d", e.Port)
	if e.Where != "" {
		where += ", " + e.Where
	}
	fmt.Fprintf(&b, "engine rank %d (%s) failed to start: %s", e.Rank, where, e.Cause)
	if len(e.LastLines) > 0 {
		fmt.Fprintf(&b, "\nlast lines of %s:", e.LogPath)
		for _, l := range e.LastLines {
			b.WriteString("\n  | " + l)
		}
	}
	if e.Hint != "" {
		b.WriteString("\nhint: " + e.Hint)
	}
	if e.LogPath != "" {
		b.WriteString("\nfull log: " + e.LogPath)
	}
	return b.String()
}

var (
	reMaxLenNeed = regexp.MustCompile(`max seq len \((\d+)\)`)
	reMaxLenEst  = regexp.MustCompile(`estimated maximum model length is (\d+)`)
	reMaxLenOld  = regexp.MustCompile(`maximum number of tokens that can be stored in KV cache \((\d+)\)`)
)

// hintRule names a known cause when any of its markers is in the log.
type hintRule struct {
	markers []string
	hint    func(lines string, port int) string
}

// offloadRules are vLLM's refusals of its KV offloading, the host KV tier
// of --kv-offload (vLLM 0.32.0; docs/kv-offload.md names the sources).
// Hint tries them first, as a traceback line can carry a generic marker
// too. vLLM's worker states these causes once, and the tracebacks of the
// EngineCore and the API server that follow push them out of the last
// lines: so their lines are also kept from anywhere in the output
// (tailWriter.Cues).
var offloadRules = []hintRule{
	{[]string{"CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"}, func(string, int) string {
		return "vLLM's native KV offloading (--kv-offload) runs only on CUDA, ROCm and XPU GPUs, " +
			"not on this engine's platform: run with --kv-offload off"
	}},
	{[]string{"for CPU KV offload shared region"}, func(string, int) string {
		return "the host KV tier (--kv-offload) does not fit /dev/shm, where vLLM maps it: lower --kv-offload, " +
			"enlarge /dev/shm (docker run --shm-size, or --ipc=host), " + offloadOff
	}},
	{[]string{"KV offloading found no eligible cache groups"}, func(string, int) string {
		return "vLLM finds no KV cache of this model it can offload to host memory (--kv-offload): " + offloadOff
	}},
	{[]string{"Encoder-decoder models are not currently supported with KV connectors"}, func(string, int) string {
		return "vLLM runs no KV connector, hence no host KV tier (--kv-offload), for encoder-decoder models: " + offloadOff
	}},
	{[]string{"need --enable-prefix-caching to align block sizes"}, func(string, int) string {
		return "this hybrid model needs prefix caching for the host KV tier (--kv-offload): pass " +
			"`-- --enable-prefix-caching`, " + offloadOff
	}},
	{[]string{"incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, func(string, int) string {
		return "vLLM refuses a KV connector, such as the host KV tier of --kv-offload, with " +
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: unset it, " + offloadOff
	}},
}

// offloadOff is how the host-KV-tier hints end.
const offloadOff = "or run with --kv-offload off (docs/kv-offload.md)"

var hintRules = []hintRule{
	{[]string{"max seq len", "decreasing `max_model_len`", "decreasing max_model_len"}, maxLenHint},
	{[]string{"Free memory on device", "less than desired GPU memory utilization"}, func(string, int) string {
		return "the GPU is already in use: another process holds its memory (see `warden gpus`); " +
			"stop it, choose other GPUs with --gpus, or lower -- --gpu-memory-utilization"
	}},
	{[]string{"CUDA out of memory", "OutOfMemoryError", "out of memory"}, func(string, int) string {
		return "out of GPU memory: the model may not fit one GPU (try --tp 2), or lower " +
			"-- --max-model-len, --max-num-seqs or -- --gpu-memory-utilization"
	}},
	{[]string{"GatedRepoError", "401 Client Error", "Access to model", "gated repo"}, func(string, int) string {
		return "the model is gated: accept its license on Hugging Face and set HF_TOKEN"
	}},
	{[]string{"couldn't connect to 'https://huggingface.co'", "LocalEntryNotFoundError", "offline mode",
		"Cannot find the requested files in the local cache", "Max retries exceeded with url",
		"is not a local folder and is not a valid model identifier", "Temporary failure in name resolution"},
		func(string, int) string {
			return "the model weights could not be downloaded (offline, or a wrong name?): download them first " +
				"(huggingface-cli download MODEL), pass a local path, or set HF_HUB_OFFLINE=1 with a cached model"
		}},
	{[]string{"Address already in use", "Errno 98"}, func(_ string, port int) string {
		return fmt.Sprintf("port %d is already in use (a stale engine?): check `ss -ltnp | grep %d`, "+
			"stop the old process, and run again (warden picks free ports)", port, port)
	}},
	{[]string{"unrecognized arguments: " + RequiredVLLMFlag}, func(string, int) string {
		return "this vLLM is too old for the warden: it lacks " + RequiredVLLMFlag +
			" (vLLM 0.9 and later have it); upgrade vLLM (pip install -U vllm)"
	}},
	{[]string{"unrecognized arguments: --kv-offloading-"}, func(string, int) string {
		return "this vLLM predates its KV offloading flags (--kv-offloading-backend, --kv-offloading-size), " +
			"which --kv-offload passes: upgrade vLLM (pip install -U vllm), " + offloadOff
	}},
	{[]string{"unrecognized arguments", "error: argument"}, func(string, int) string {
		return "vLLM rejected an argument: check the extra arguments after --, and `vllm serve --help`"
	}},
	{[]string{"No CUDA GPUs are available", "no CUDA-capable device", "Failed to infer device type"}, func(string, int) string {
		return "the engine found no usable GPU: check CUDA_VISIBLE_DEVICES, --gpus and the driver " +
			"(nvidia-smi), or run without GPUs using --engine sim"
	}},
}

func maxLenHint(text string, _ int) string {
	need := lastMatch(reMaxLenNeed, text)
	fit := lastMatch(reMaxLenEst, text)
	if fit == "" {
		fit = lastMatch(reMaxLenOld, text)
	}
	msg := "the model's default context"
	if need != "" {
		msg += " (" + need + " tokens)"
	}
	msg += " does not fit the KV cache of this GPU: start with a shorter one"
	if n, err := strconv.Atoi(fit); err == nil && n > 0 {
		return msg + fmt.Sprintf(", e.g. `warden serve ... -- --max-model-len %d` (the largest the log says fits)", n)
	}
	return msg + ", e.g. `warden serve ... -- --max-model-len 32768`, or raise -- --gpu-memory-utilization"
}

func lastMatch(re *regexp.Regexp, text string) string {
	m := re.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// Hint names the known cause found in an engine's last output lines, or ""
// when none matches. port is the rank's port, for the port-in-use hint.
// The lines kept as cues (tailWriter.Cues) may be passed too, when the last
// lines name nothing.
func Hint(lines []string, port int) string {
	text := strings.Join(lines, "\n")
	for _, rules := range [][]hintRule{offloadRules, hintRules} {
		for _, r := range rules {
			for _, m := range r.markers {
				if strings.Contains(text, m) {
					return r.hint(text, port)
				}
			}
		}
	}
	return ""
}

// exitHint adds what a bare signal death suggests when the log names nothing.
func exitHint(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "the engine was killed by SIGKILL: the host may have run out of RAM (check `dmesg` for the OOM killer)"
	}
	return ""
}

// isCue reports whether line carries one of offloadRules' markers
// (tailWriter keeps such lines as Cues).
func isCue(line string) bool {
	for _, r := range offloadRules {
		for _, m := range r.markers {
			if strings.Contains(line, m) {
				return true
			}
		}
	}
	return false
}

func itoa(n int) string { return strconv.Itoa(n) }
