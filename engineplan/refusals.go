package engineplan

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// What an engine's refusal to start means for its plan. vLLM states why it
// will not serve in one line of its output (a ValueError, an argparse
// error, a logged ERROR), and for the known causes that line names what to
// change in what the engine is told: --max-model-len, --kv-offload,
// --tools, the GPUs, the image. enginelog finds the cause line in a rank's
// log (enginelog/tail.go, enginelog/classify.go); these rules say what it means.

var (
	reMaxLenNeed = regexp.MustCompile(`max seq len \((\d+)\)`)
	reMaxLenEst  = regexp.MustCompile(`estimated maximum model length is (\d+)`)
	reMaxLenOld  = regexp.MustCompile(`maximum number of tokens that can be stored in KV cache \((\d+)\)`)
	// vLLM 0.32 (entrypoints/launchers/launcher.py, validate_api_server_args):
	// KeyError: 'invalid tool call parser: nope (chose from { apertus,... })'
	reBadParser = regexp.MustCompile(`invalid (tool call|reasoning) parser: (\S*) \(chose from \{ ?([^}]*?) ?\}\)`)
	// vLLM 0.32 (v1/engine/utils.py, wait_for_engine_startup): a core
	// process's exit code, negative when a signal ended it:
	// Failed core proc(s): {'EngineCore': -9}
	reCoreKilled = regexp.MustCompile(`Failed core proc\(s\): \{[^}]*?'([^']+)': -(\d+)`)
)

// Refusal is one of vLLM's (or the container runtime's) known refusals to
// start, and what to change in the engines' plan to get past it: a cause
// line of an engine's log (launch finds those) that carries one of
// Markers, or matches Re, names it.
type Refusal struct {
	Markers []string
	Hint    func(text string, port int) string // text: the cause lines, one a line
	Re      *regexp.Regexp
}

// Matches reports whether line names r.
func (r *Refusal) Matches(line string) bool {
	for _, m := range r.Markers {
		if strings.Contains(line, m) {
			return true
		}
	}
	return r.Re != nil && r.Re.MatchString(line)
}

// OffloadRefusals are vLLM's refusals of its KV offloading, the host KV tier
// of --kv-offload (vLLM 0.32.0; docs/kv-offload.md names the sources).
// They are tried first, as a traceback line can carry a generic marker too.
var OffloadRefusals = []Refusal{
	{Markers: []string{"CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"}, Hint: func(string, int) string {
		return "vLLM's native KV offloading (--kv-offload) runs only on CUDA, ROCm and XPU GPUs, " +
			"not on this engine's platform: run with --kv-offload off"
	}},
	{Markers: []string{"for CPU KV offload shared region"}, Hint: func(string, int) string {
		return "the host KV tier (--kv-offload) does not fit /dev/shm, where vLLM maps it: lower --kv-offload, " +
			"enlarge /dev/shm (docker run --shm-size, or --ipc=host), " + offloadOff
	}},
	{Markers: []string{"KV offloading found no eligible cache groups"}, Hint: func(string, int) string {
		return "vLLM finds no KV cache of this model it can offload to host memory (--kv-offload): " + offloadOff
	}},
	{Markers: []string{"Encoder-decoder models are not currently supported with KV connectors"}, Hint: func(string, int) string {
		return "vLLM runs no KV connector, hence no host KV tier (--kv-offload), for encoder-decoder models: " + offloadOff
	}},
	{Markers: []string{"need --enable-prefix-caching to align block sizes"}, Hint: func(string, int) string {
		return "this hybrid model needs prefix caching for the host KV tier (--kv-offload): pass " +
			"`-- --enable-prefix-caching`, " + offloadOff
	}},
	{Markers: []string{"incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, Hint: func(string, int) string {
		return "vLLM refuses a KV connector, such as the host KV tier of --kv-offload, with " +
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: unset it, " + offloadOff
	}},
}

// offloadOff is how the host-KV-tier hints end.
const offloadOff = "or run with --kv-offload off (docs/kv-offload.md)"

// Refusals are the other known causes, tried in order after OffloadRefusals.
var Refusals = []Refusal{
	// The container runtime's own refusals (--image; docker 20.10 to 28 and
	// podman print them before any engine output).
	{Markers: []string{"Unable to find image", "pull access denied", "No such image", "manifest unknown",
		"repository does not exist", "image not known"}, Hint: func(string, int) string {
		return "the engine image is not on this host and could not be pulled: pull or build it first " +
			"(docker pull IMAGE), and check its name and tag (--image)"
	}},
	{Markers: []string{"could not select device driver", "unknown or invalid runtime name: nvidia", "nvidia-container-cli",
		"unresolvable CDI devices", "CDI device injection failed"}, Hint: func(string, int) string {
		return "the container runtime cannot give containers GPUs: install the NVIDIA Container Toolkit and " +
			"configure it (nvidia-ctk runtime configure --runtime=docker, then restart the daemon; for Podman " +
			"nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml); docs/container.md"
	}},
	{Markers: []string{"Cannot connect to the Docker daemon"}, Hint: func(string, int) string {
		return "the Docker daemon is not running: start it (systemctl start docker, or dockerd &) and run again"
	}},
	{Markers: []string{"max seq len", "decreasing `max_model_len`", "decreasing max_model_len"}, Hint: maxLenHint},
	{Markers: []string{"Free memory on device", "less than desired GPU memory utilization"}, Hint: func(string, int) string {
		return "the GPU is already in use: another process holds its memory (see `warden gpus`); " +
			"stop it, choose other GPUs with --gpus, or lower -- --gpu-memory-utilization"
	}},
	{Markers: []string{"CUDA out of memory", "OutOfMemoryError", "out of memory"}, Hint: func(string, int) string {
		return "out of GPU memory: the model may not fit one GPU (try --tp 2), or lower " +
			"-- --max-model-len, --max-num-seqs or -- --gpu-memory-utilization"
	}},
	{Re: reCoreKilled, Hint: coreKilledHint},
	{Re: reBadParser, Hint: badParserHint},
	{Markers: []string{"--enable-auto-tool-choice requires --tool-call-parser"}, Hint: func(string, int) string {
		return "vLLM's --enable-auto-tool-choice needs a --tool-call-parser: drop both from the arguments after -- " +
			"and let --tools pass them (auto: the model's parser; docs/tools.md), or add -- --tool-call-parser NAME"
	}},
	{Markers: []string{"GatedRepoError", "401 Client Error", "Access to model", "gated repo"}, Hint: func(string, int) string {
		return "the model is gated: accept its license on Hugging Face and set HF_TOKEN"
	}},
	{Markers: []string{"Repo id must be in the form", "Incorrect path_or_model_id"}, Hint: func(string, int) string {
		return "--model is neither a local folder nor a Hugging Face model name (vLLM reads a path that does not " +
			"exist as a name): check the path, or pass a name such as Qwen/Qwen3-4B-Instruct-2507"
	}},
	{Markers: []string{"couldn't connect to 'https://huggingface.co'", "LocalEntryNotFoundError", "offline mode",
		"Cannot find the requested files in the local cache", "Max retries exceeded with url",
		"is not a local folder and is not a valid model identifier", "Temporary failure in name resolution"},
		Hint: func(string, int) string {
			return "the model weights could not be downloaded (offline, or a wrong name?): download them first " +
				"(huggingface-cli download MODEL), pass a local path, or set HF_HUB_OFFLINE=1 with a cached model"
		}},
	{Markers: []string{"Address already in use", "Errno 98"}, Hint: func(_ string, port int) string {
		return fmt.Sprintf("port %d is already in use (a stale engine?): check `ss -ltnp | grep %d`, "+
			"stop the old process, and run again (warden picks free ports)", port, port)
	}},
	{Markers: []string{"unrecognized arguments: " + RequiredVLLMFlag}, Hint: func(string, int) string {
		return "this vLLM is too old for the warden: it lacks " + RequiredVLLMFlag +
			" (vLLM 0.9 and later have it); upgrade vLLM (pip install -U vllm)"
	}},
	{Markers: []string{"unrecognized arguments: --kv-offloading-"}, Hint: func(string, int) string {
		return "this vLLM predates its KV offloading flags (--kv-offloading-backend, --kv-offloading-size), " +
			"which --kv-offload passes: upgrade vLLM (pip install -U vllm), " + offloadOff
	}},
	{Markers: []string{"unrecognized arguments", "error: argument"}, Hint: func(string, int) string {
		return "vLLM rejected an argument: check the extra arguments after --, and `vllm serve --help`"
	}},
	{Markers: []string{"No CUDA GPUs are available", "no CUDA-capable device", "Failed to infer device type"}, Hint: func(string, int) string {
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
	msg := "the context"
	if need != "" {
		msg += " (" + need + " tokens: -- --max-model-len, or the model's default)"
	}
	msg += " does not fit the engine's KV cache: start with a shorter one"
	if n, err := strconv.Atoi(fit); err == nil && n > 0 {
		return msg + fmt.Sprintf(", e.g. `warden serve ... -- --max-model-len %d` (the largest the log says fits), "+
			"or give the KV cache more memory (-- --gpu-memory-utilization on GPUs, --cpu-kv-cache on CPUs)", n)
	}
	return msg + ", e.g. `warden serve ... -- --max-model-len 32768`, or raise -- --gpu-memory-utilization"
}

// badParserHint answers vLLM's refusal of a tool-call or reasoning parser
// it does not have, with the names it has.
func badParserHint(text string, _ int) string {
	m := reBadParser.FindAllStringSubmatch(text, -1)
	last := m[len(m)-1]
	names := strings.Join(strings.FieldsFunc(last[3], func(r rune) bool { return r == ',' || r == ' ' }), ", ")
	if last[1] == "reasoning" {
		return fmt.Sprintf("this vLLM has no reasoning parser %q: pass --reasoning auto (the model's, when it "+
			"thinks), off, or one of vLLM's names: %s (check --reasoning and -- --reasoning-parser; docs/tools.md)",
			last[2], names)
	}
	return fmt.Sprintf("this vLLM has no tool-call parser %q: pass --tools auto (the parser that fits the model) "+
		"or one of vLLM's names: %s (check --tools and -- --tool-call-parser; docs/tools.md)", last[2], names)
}

// coreKilledHint answers an EngineCore that a signal ended while starting.
func coreKilledHint(text string, _ int) string {
	m := reCoreKilled.FindAllStringSubmatch(text, -1)
	last := m[len(m)-1]
	n, _ := strconv.Atoi(last[2])
	sig := syscall.Signal(n)
	msg := fmt.Sprintf("vLLM's %s process was killed by signal %d (%s) while the engine started", last[1], n, sig)
	if sig == syscall.SIGKILL {
		return msg + ": the host may have run out of RAM (check `dmesg` for the OOM killer)"
	}
	return msg + ": see the full log"
}

func lastMatch(re *regexp.Regexp, text string) string {
	m := re.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}
