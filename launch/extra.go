package launch

import (
	"fmt"
	"strings"
)

// reservedFlags are the engine flags the warden sets itself, with the
// warden flag to use instead. Passing them after `--` would move an engine
// off loopback, off the port the proxy knows, or away from the limits the
// spill threshold derives from.
var reservedFlags = map[string]string{
	"--host":                 "engines listen on 127.0.0.1 only; use the warden's --host for its own port",
	"--port":                 "the warden picks free loopback ports; use the warden's --port for its own",
	"--uds":                  "engines listen on a loopback TCP port the warden picks",
	"--served-model-name":    "use the warden's --served-model-name",
	"--max-num-seqs":         "use the warden's --max-num-seqs (the spill threshold derives from it)",
	"--tensor-parallel-size": "use the warden's --tp",
	"-tp":                    "use the warden's --tp",
}

// CheckExtra rejects extra engine arguments (after `--`) that set a flag
// the warden owns, naming the flag and what to use instead.
func CheckExtra(extra []string) error {
	for _, a := range extra {
		name, _, _ := strings.Cut(a, "=")
		if hint, ok := reservedFlags[name]; ok {
			return fmt.Errorf("engine argument %s is set by the warden: %s", name, hint)
		}
	}
	return nil
}
