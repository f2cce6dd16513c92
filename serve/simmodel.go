package serve

import (
	"fmt"
	"log/slog"
	"os"
)

// simNotes is what a user meeting the simulator must know (SimFirstContact's
// lines, for the status and the ready lines); it also warns of a --model
// the simulator knows nothing of. Nil for vLLM.
func simNotes(o Options, log *slog.Logger) []string {
	if o.Engine != "sim" {
		return nil
	}
	if msg := simUnknownModel(o); msg != "" {
		log.Warn(msg)
	}
	if o.SimFirstContact == nil {
		return nil
	}
	return o.SimFirstContact(o.Extra)
}

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
