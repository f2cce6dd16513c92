package engineplan

import (
	"fmt"
	"strings"
)

// reservedFlags are the engine flags the warden sets itself, with the
// warden flag to use instead. Passing them after `--` would move an engine
// off loopback, off the port the proxy knows, away from the limits the
// spill threshold derives from, make every rank a data-parallel server of
// its own, or give every rank a host KV tier sized without the others (--kv-offload splits the host's memory over them).
var reservedFlags = map[string]string{
	"--host":                 "engines listen on 127.0.0.1 only; use the warden's --host for its own port",
	"--port":                 "the warden picks free loopback ports; use the warden's --port for its own",
	"--uds":                  "engines listen on a loopback TCP port the warden picks",
	"--served-model-name":    "use the warden's --served-model-name",
	"--max-num-seqs":         "use the warden's --max-num-seqs (the spill threshold derives from it)",
	"--tensor-parallel-size": "use the warden's --tp",
	"-tp":                    "use the warden's --tp",
	"--data-parallel-size":   "use the warden's --dp\n(one vLLM server per rank), or --dp with --vllm-dp (one server, vLLM's own data parallelism)",
	"-dp":                    "use the warden's --dp\n(one vLLM server per rank), or --dp with --vllm-dp (one server, vLLM's own data parallelism)",
	"--kv-offloading-size":   "use the warden's --kv-offload (auto or a size per rank; it sizes every rank's host KV tier from the host's memory)",
	"--kv-offloading-backend": "use the warden's --kv-offload, which runs vLLM's native backend (LMCache needs its own server: " +
		"configure it with -- --kv-transfer-config and leave --kv-offload off)",
}

// CheckExtra rejects extra engine arguments (after `--`) that set a flag
// the warden owns, naming the flag and what to use instead. vLLM reads
// "--max_num_seqs" as "--max-num-seqs", and so does the check.
func CheckExtra(extra []string) error {
	for _, a := range extra {
		name, _, _ := strings.Cut(a, "=")
		if strings.HasPrefix(name, "--") {
			name = "--" + strings.ReplaceAll(name[2:], "_", "-")
		}
		if hint, ok := reservedFlags[name]; ok {
			return fmt.Errorf("engine argument %s is set by the warden: %s", name, hint)
		}
	}
	return nil
}
