package serve

import (
	"fmt"
	"os"
)

// simUnknownModel is the warning for a --model the simulator knows nothing
// of (no files on this machine, not in its table): usually a misspelt name,
// which a real vLLM would refuse, while the simulator starts anyway with its
// default context. "" when the engine is not the simulator, the model is
// known, or nothing can tell (no SimModelContext).
func simUnknownModel(o Options) string {
	if o.Engine != "sim" || o.SimModelContext == nil {
		return ""
	}
	if n, _ := o.SimModelContext(o.Model, os.Getenv); n > 0 {
		return ""
	}
	return fmt.Sprintf("--model %q: the simulator finds no files of it on this machine and does not know the name; "+
		"a misspelt name? (vLLM would refuse it; the simulator runs with its default context and shape, "+
		"e.g. --model Qwen/Qwen3-4B-Instruct-2507 is known)", o.Model)
}
