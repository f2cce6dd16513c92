package engineplan

import (
	"os"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/gpu"
	"github.com/lmwarden/warden/router/engine"
)

// Engine describes the program that serves one rank.
type Engine struct {
	Kind       string   // "vllm" or "sim"
	VLLMPath   string   // vllm executable ("vllm" on PATH when empty); Kind "vllm" only
	SimPath    string   // warden executable for Kind "sim"; os.Executable() when empty
	Model      string   // model name or path, the positional argument of `serve`
	ServedName string   // --served-model-name; Model when empty
	MaxNumSeqs int      // --max-num-seqs; omitted when <= 0
	TP         int      // --tensor-parallel-size; omitted when <= 1
	DP         int      // --data-parallel-size (vLLM's own data parallelism, one server); omitted when <= 1
	KVBytes    uint64   // --kv-cache-memory-bytes (CPU engines); omitted when 0
	SimArgs    []string // simulator-only flags, before Extra; Kind "sim" only
	Extra      []string // the user's args after `--`, passed verbatim, last

	// OffloadBytes is the engine's host-RAM KV tier, for all its TP workers
	// together: --kv-offloading-backend native --kv-offloading-size <GiB>,
	// for vLLM and the simulator alike; omitted when 0.
	OffloadBytes uint64

	// ToolFlags are the tool-calling flags ChooseTools picked
	// (ToolsChoice.Flags), before Extra.
	ToolFlags []string
	// MaxModelLen is --max-model-len for every engine ("auto": vLLM fits
	// the longest context its KV cache holds; ContextFlag); omitted when "".
	MaxModelLen string
	// KVEvents: the engine publishes its KV-cache events there
	// (--kv-events-config, unless Extra gives its own); zero: not asked.
	KVEvents KVEvents
	// Host is the engine's --host: 127.0.0.1 when empty. An engine in a
	// container listens on all of the container's addresses (0.0.0.0),
	// reached through a port published on the host's loopback only.
	Host string
}

// Argv is the command line that serves the model on 127.0.0.1:port:
//
//	vllm: VLLMPath serve MODEL --host 127.0.0.1 --port P --served-model-name N
//	      --max-num-seqs S [--tensor-parallel-size T] [--kv-cache-memory-bytes B]
//	      --enable-prompt-tokens-details
//	      [--kv-offloading-backend native --kv-offloading-size GiB]
//	      [--max-model-len L] [--enable-auto-tool-choice --tool-call-parser P]
//	      [--reasoning-parser R] Extra...
//	sim:  SimPath sim serve MODEL (the same flags) SimArgs... Extra...
//
// The offloading flags follow --enable-prompt-tokens-details so that a vLLM
// too old for either names that one first in its "unrecognized arguments"
// (Hint tells the two apart).
func (e Engine) Argv(port int) []string {
	var argv []string
	if e.Kind == "sim" {
		self := e.SimPath
		if self == "" {
			if exe, err := os.Executable(); err == nil {
				self = exe
			} else {
				self = os.Args[0]
			}
		}
		argv = []string{self, "sim", "serve"}
	} else {
		path := e.VLLMPath
		if path == "" {
			path = "vllm"
		}
		argv = []string{path, "serve"}
	}
	return append(argv, e.ServeArgs(port)...)
}

// ServeArgs are Argv's arguments after `serve`: MODEL and the flags. A
// container image whose entry point is `vllm serve` (vLLM's own) takes
// them as its command.
func (e Engine) ServeArgs(port int) []string {
	name := e.ServedName
	if name == "" {
		name = e.Model
	}
	host := e.Host
	if host == "" {
		host = "127.0.0.1"
	}
	argv := []string{e.Model, "--host", host, "--port", strconv.Itoa(port), "--served-model-name", name}
	if e.MaxNumSeqs > 0 {
		argv = append(argv, "--max-num-seqs", strconv.Itoa(e.MaxNumSeqs))
	}
	if e.TP > 1 {
		argv = append(argv, "--tensor-parallel-size", strconv.Itoa(e.TP))
	}
	if e.DP > 1 {
		argv = append(argv, "--data-parallel-size", strconv.Itoa(e.DP))
	}
	if e.KVBytes > 0 {
		argv = append(argv, "--kv-cache-memory-bytes", strconv.FormatUint(e.KVBytes, 10))
	}
	argv = append(argv, RequiredVLLMFlag)
	if e.OffloadBytes > 0 {
		argv = append(argv, "--kv-offloading-backend", OffloadBackend, "--kv-offloading-size", OffloadGiB(e.OffloadBytes))
	}
	if e.MaxModelLen != "" {
		argv = append(argv, "--max-model-len", e.MaxModelLen)
	}
	if e.KVEvents.On() && !e.ownKVEvents() {
		argv = append(argv, KVEventsFlag, e.KVEvents.Config(port))
	}
	argv = append(argv, e.ToolFlags...)
	if e.Kind == "sim" {
		argv = append(argv, e.SimArgs...)
	}
	return append(argv, e.Extra...)
}

const gib = 1 << 30

// DefaultMaxNumSeqs is vLLM's own default for max_num_seqs of an API server
// on devs: 1024 when every GPU has at least 70 GiB and none is an A100, else
// engine.VLLMMaxNumSeqs (also for no GPUs, e.g. the simulator).
func DefaultMaxNumSeqs(devs []gpu.Device) int {
	if len(devs) == 0 {
		return engine.VLLMMaxNumSeqs
	}
	for _, d := range devs {
		if d.MemTotal < 70*gib || strings.Contains(strings.ToUpper(d.Name), "A100") {
			return engine.VLLMMaxNumSeqs
		}
	}
	return 1024
}

// CPUDefaultMaxNumSeqs is vLLM's own max_num_seqs for an API server on the
// CPU platform (engine/arg_utils.py, 0.32.0: 128 x world size).
const CPUDefaultMaxNumSeqs = 128
