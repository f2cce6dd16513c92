package launch

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/lmwarden/warden/engineplan"
)

// StartupError is why a rank did not become healthy during Start. Its
// Error() is the user-facing message: rank and exit, then vLLM's line that
// names the cause and a hint naming what to do, then a few lines of the
// rank's log and its path.
type StartupError struct {
	Rank  int
	Port  int
	Where string // what the rank runs on: "GPU 0", "CPU 0-3"; empty for the simulator
	Cause string // "exited with status 1", "not healthy after 10m0s", "canceled", "cannot start: ..."
	// Reason is vLLM's line, anywhere in what the rank printed since it
	// started, that names the root cause, without vLLM's log prefix
	// ("ValueError: To serve at least one request ..."); "" when none was
	// found. Never a warning, nor vLLM's pointer to a cause stated above
	// ("Engine core initialization failed. See root cause above.") when
	// the cause itself was printed.
	Reason     string
	ReasonLine int    // Reason's line number in LogPath (from 1); 0 when unknown
	Hint       string // what to do; "" when the cause is not a known one
	// Context is the log lines Error shows: the lines up to and including
	// Reason's, or without a Reason the last few. Nil (a StartupError built
	// by hand): Error shows all of LastLines, then the hint.
	Context    []string
	LinesAfter int      // how many log lines follow Reason's
	LastLines  []string // the rank's last output lines, oldest first
	LogPath    string
}

// Error renders the whole report, several lines long.
func (e *StartupError) Error() string {
	var b strings.Builder
	where := fmt.Sprintf("port %d", e.Port)
	if e.Where != "" {
		where += ", " + e.Where
	}
	fmt.Fprintf(&b, "engine rank %d (%s) failed to start: %s", e.Rank, where, e.Cause)
	if e.Context == nil {
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
	if e.Reason != "" {
		b.WriteString("\ncause: " + e.Reason)
	}
	if e.Hint != "" {
		b.WriteString("\nhint: " + e.Hint)
	}
	if len(e.Context) > 0 {
		switch {
		case e.Reason != "" && e.ReasonLine > 0:
			fmt.Fprintf(&b, "\nlast lines of %s up to the cause, line %d:", e.LogPath, e.ReasonLine)
		case e.Reason != "":
			fmt.Fprintf(&b, "\nlast lines of %s up to the cause:", e.LogPath)
		default:
			fmt.Fprintf(&b, "\nlast lines of %s:", e.LogPath)
		}
		for _, l := range e.Context {
			b.WriteString("\n  | " + l)
		}
	}
	if e.LogPath != "" {
		b.WriteString("\nfull log: " + e.LogPath)
		switch {
		case e.Reason == "" || e.LinesAfter <= 0:
		case e.LinesAfter == 1:
			b.WriteString(" (1 more line after the cause)")
		default:
			fmt.Fprintf(&b, " (%d more lines after the cause)", e.LinesAfter)
		}
	}
	return b.String()
}

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

// hintRule names a known cause when a cause line (isCause) carries one of
// its markers, or matches re.
type hintRule struct {
	markers []string
	hint    func(text string, port int) string // text: the cause lines, one a line
	re      *regexp.Regexp
}

func (r *hintRule) matches(line string) bool {
	for _, m := range r.markers {
		if strings.Contains(line, m) {
			return true
		}
	}
	return r.re != nil && r.re.MatchString(line)
}

// offloadRules are vLLM's refusals of its KV offloading, the host KV tier
// of --kv-offload (vLLM 0.32.0; docs/kv-offload.md names the sources).
// They are tried first, as a traceback line can carry a generic marker too.
var offloadRules = []hintRule{
	{markers: []string{"CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"}, hint: func(string, int) string {
		return "vLLM's native KV offloading (--kv-offload) runs only on CUDA, ROCm and XPU GPUs, " +
			"not on this engine's platform: run with --kv-offload off"
	}},
	{markers: []string{"for CPU KV offload shared region"}, hint: func(string, int) string {
		return "the host KV tier (--kv-offload) does not fit /dev/shm, where vLLM maps it: lower --kv-offload, " +
			"enlarge /dev/shm (docker run --shm-size, or --ipc=host), " + offloadOff
	}},
	{markers: []string{"KV offloading found no eligible cache groups"}, hint: func(string, int) string {
		return "vLLM finds no KV cache of this model it can offload to host memory (--kv-offload): " + offloadOff
	}},
	{markers: []string{"Encoder-decoder models are not currently supported with KV connectors"}, hint: func(string, int) string {
		return "vLLM runs no KV connector, hence no host KV tier (--kv-offload), for encoder-decoder models: " + offloadOff
	}},
	{markers: []string{"need --enable-prefix-caching to align block sizes"}, hint: func(string, int) string {
		return "this hybrid model needs prefix caching for the host KV tier (--kv-offload): pass " +
			"`-- --enable-prefix-caching`, " + offloadOff
	}},
	{markers: []string{"incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, hint: func(string, int) string {
		return "vLLM refuses a KV connector, such as the host KV tier of --kv-offload, with " +
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: unset it, " + offloadOff
	}},
}

// offloadOff is how the host-KV-tier hints end.
const offloadOff = "or run with --kv-offload off (docs/kv-offload.md)"

// hintRules are the other known causes, tried in order after offloadRules.
var hintRules = []hintRule{
	// The container runtime's own refusals (--image; docker 20.10 to 28 and
	// podman print them before any engine output).
	{markers: []string{"Unable to find image", "pull access denied", "No such image", "manifest unknown",
		"repository does not exist", "image not known"}, hint: func(string, int) string {
		return "the engine image is not on this host and could not be pulled: pull or build it first " +
			"(docker pull IMAGE), and check its name and tag (--image)"
	}},
	{markers: []string{"could not select device driver", "unknown or invalid runtime name: nvidia", "nvidia-container-cli",
		"unresolvable CDI devices", "CDI device injection failed"}, hint: func(string, int) string {
		return "the container runtime cannot give containers GPUs: install the NVIDIA Container Toolkit and " +
			"configure it (nvidia-ctk runtime configure --runtime=docker, then restart the daemon; for Podman " +
			"nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml); docs/container.md"
	}},
	{markers: []string{"Cannot connect to the Docker daemon"}, hint: func(string, int) string {
		return "the Docker daemon is not running: start it (systemctl start docker, or dockerd &) and run again"
	}},
	{markers: []string{"max seq len", "decreasing `max_model_len`", "decreasing max_model_len"}, hint: maxLenHint},
	{markers: []string{"Free memory on device", "less than desired GPU memory utilization"}, hint: func(string, int) string {
		return "the GPU is already in use: another process holds its memory (see `warden gpus`); " +
			"stop it, choose other GPUs with --gpus, or lower -- --gpu-memory-utilization"
	}},
	{markers: []string{"CUDA out of memory", "OutOfMemoryError", "out of memory"}, hint: func(string, int) string {
		return "out of GPU memory: the model may not fit one GPU (try --tp 2), or lower " +
			"-- --max-model-len, --max-num-seqs or -- --gpu-memory-utilization"
	}},
	{re: reCoreKilled, hint: coreKilledHint},
	{re: reBadParser, hint: badParserHint},
	{markers: []string{"--enable-auto-tool-choice requires --tool-call-parser"}, hint: func(string, int) string {
		return "vLLM's --enable-auto-tool-choice needs a --tool-call-parser: drop both from the arguments after -- " +
			"and let --tools pass them (auto: the model's parser; docs/tools.md), or add -- --tool-call-parser NAME"
	}},
	{markers: []string{"GatedRepoError", "401 Client Error", "Access to model", "gated repo"}, hint: func(string, int) string {
		return "the model is gated: accept its license on Hugging Face and set HF_TOKEN"
	}},
	{markers: []string{"Repo id must be in the form", "Incorrect path_or_model_id"}, hint: func(string, int) string {
		return "--model is neither a local folder nor a Hugging Face model name (vLLM reads a path that does not " +
			"exist as a name): check the path, or pass a name such as Qwen/Qwen3-4B-Instruct-2507"
	}},
	{markers: []string{"couldn't connect to 'https://huggingface.co'", "LocalEntryNotFoundError", "offline mode",
		"Cannot find the requested files in the local cache", "Max retries exceeded with url",
		"is not a local folder and is not a valid model identifier", "Temporary failure in name resolution"},
		hint: func(string, int) string {
			return "the model weights could not be downloaded (offline, or a wrong name?): download them first " +
				"(huggingface-cli download MODEL), pass a local path, or set HF_HUB_OFFLINE=1 with a cached model"
		}},
	{markers: []string{"Address already in use", "Errno 98"}, hint: func(_ string, port int) string {
		return fmt.Sprintf("port %d is already in use (a stale engine?): check `ss -ltnp | grep %d`, "+
			"stop the old process, and run again (warden picks free ports)", port, port)
	}},
	{markers: []string{"unrecognized arguments: " + engineplan.RequiredVLLMFlag}, hint: func(string, int) string {
		return "this vLLM is too old for the warden: it lacks " + engineplan.RequiredVLLMFlag +
			" (vLLM 0.9 and later have it); upgrade vLLM (pip install -U vllm)"
	}},
	{markers: []string{"unrecognized arguments: --kv-offloading-"}, hint: func(string, int) string {
		return "this vLLM predates its KV offloading flags (--kv-offloading-backend, --kv-offloading-size), " +
			"which --kv-offload passes: upgrade vLLM (pip install -U vllm), " + offloadOff
	}},
	{markers: []string{"unrecognized arguments", "error: argument"}, hint: func(string, int) string {
		return "vLLM rejected an argument: check the extra arguments after --, and `vllm serve --help`"
	}},
	{markers: []string{"No CUDA GPUs are available", "no CUDA-capable device", "Failed to infer device type"}, hint: func(string, int) string {
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

// Hint names the known cause that lines state (as the warden reads an
// engine's output: cause lines only, see isCause), or "" when none does.
// port is the rank's port, for the port-in-use hint.
func Hint(lines []string, port int) string {
	t := newTailWriter(io.Discard)
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			t.push(l)
		}
	}
	return t.diagnose(port, 0).hint
}

// exitHint adds what a bare signal death suggests when the log names nothing.
func exitHint(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "the engine was killed by SIGKILL: the host may have run out of RAM (check `dmesg` for the OOM killer)"
	}
	return ""
}

// lineKind is what a line of an engine's output can tell about a cause.
type lineKind int

const (
	notCause      lineKind = iota // progress, INFO, warnings, traceback frames
	exceptionLine                 // "ValueError: ...", "vllm: error: ...", "Fatal Python error: ..."
	errorLine                     // logged at ERROR or CRITICAL
	markerLine                    // none of those, but with a hint rule's marker
)

var (
	// rePrefix is vLLM's prefix of a line: the process it came from, then
	// for a logged line its level, time and source.
	// (EngineCore_DP0 pid=18799) ERROR 10-08 20:33:48 [core.py:708] ...
	rePrefix = regexp.MustCompile(`^(?:\([\w.:\-]+(?: pid=\d+)?\) )?` +
		`(?:(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?)?`)
	// reException is an exception's last line, as Python prints it.
	reException = regexp.MustCompile(`^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::\s|$)` +
		`|^Fatal Python error: |^[\w.\- ]+: error: |^terminate called after throwing`)
	// reWarning is a warning that is not a logged one: Python's warnings
	// module ("/x.py:254: UserWarning: ..."), PyTorch's C++ ("[W1201 ...").
	reWarning = regexp.MustCompile(`^\S*:\d+: \w*Warning: |^\[W\d{4} |^\w*Warning: `)
	// reGeneric are vLLM's pointers to a cause printed above them, and
	// the ends of tracebacks that say nothing of their own.
	reGeneric = regexp.MustCompile(`(?i)root cause|initialization failed|failed to start\.?$|^\w+ failed\.?$|` +
		`hit an exception\.?$|died unexpectedly|^SystemExit|^KeyboardInterrupt|^asyncio\.exceptions\.CancelledError`)
)

// classify says what line can tell about a cause, and returns its message
// (the line without vLLM's prefix). A warning is never a cause, nor is a
// traceback's frame or a line logged below ERROR.
func classify(line string) (string, lineKind) {
	m := rePrefix.FindStringSubmatchIndex(line)
	msg := strings.TrimRight(line[m[1]:], " \t")
	level := ""
	if m[2] >= 0 {
		level = line[m[2]:m[3]]
	}
	switch {
	case level == "DEBUG" || level == "INFO" || warningLevel(level) || warningMsg(msg):
		return msg, notCause
	case strings.HasPrefix(msg, " ") || strings.HasPrefix(msg, "\t"):
		if t := strings.TrimSpace(msg); strings.HasPrefix(t, "what():") { // C++ std::terminate
			return t, exceptionLine
		}
		return msg, notCause // traceback frames and their source lines
	case reException.MatchString(msg):
		return msg, exceptionLine
	case level == "ERROR" || level == "CRITICAL":
		if strings.HasPrefix(msg, "Traceback (most recent call last)") {
			return msg, notCause
		}
		return msg, errorLine
	case hasMarker(msg):
		return msg, markerLine
	}
	return msg, notCause
}

// isWarning reports whether line is a warning: logged at WARNING, Python's
// warnings module, PyTorch's C++ warnings, the resource tracker's leaks.
func isWarning(line string) bool {
	m := rePrefix.FindStringSubmatchIndex(line)
	return m[2] >= 0 && warningLevel(line[m[2]:m[3]]) || warningMsg(line[m[1]:])
}

func warningLevel(level string) bool { return level == "WARNING" || level == "WARN" }

func warningMsg(msg string) bool {
	return reWarning.MatchString(msg) || strings.Contains(msg, "resource_tracker: There appear to be")
}

// isGeneric reports whether msg only points to a cause stated elsewhere.
func isGeneric(msg string) bool { return reGeneric.MatchString(msg) }

// hasMarker reports whether line carries a hint rule's marker.
func hasMarker(line string) bool {
	for _, rules := range [][]hintRule{offloadRules, hintRules} {
		for i := range rules {
			if rules[i].matches(line) {
				return true
			}
		}
	}
	return false
}

// isCue reports whether line is a cause line with a hint rule's marker
// (tailWriter.Cues returns such lines).
func isCue(line string) bool {
	_, kind := classify(line)
	return kind != notCause && hasMarker(line)
}

func itoa(n int) string { return strconv.Itoa(n) }
