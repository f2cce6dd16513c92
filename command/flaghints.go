package command

import "strings"

// foreignFlags are names users bring from elsewhere (vLLM, other routers)
// for what a warden flag does: each maps to the warden flags to suggest, in
// order; the first the command has wins.
var foreignFlags = map[string][]string{
	"replicas":             {"dp", "replica"},
	"num-replicas":         {"dp", "replica"},
	"data-parallel-size":   {"dp", "dp-ranks"},
	"data-parallel":        {"dp", "dp-ranks"},
	"dp-size":              {"dp", "dp-ranks"},
	"tensor-parallel-size": {"tp"},
	"tp-size":              {"tp"},
	"served-model":         {"served-model-name"},
	"endpoint":             {"replica", "url"},
	"backend":              {"replica", "url"},
	"upstream":             {"replica", "url"},
}

// engineFlags are vLLM's (and the simulator's, all --sim-*) flags that
// belong after `--`, where warden serve passes them to every engine.
var engineFlags = map[string]bool{
	"max-model-len": true, "gpu-memory-utilization": true, "dtype": true, "enforce-eager": true,
	"block-size": true, "kv-cache-dtype": true, "quantization": true, "trust-remote-code": true,
	"enable-prefix-caching": true, "max-num-batched-tokens": true, "enable-chunked-prefill": true,
	"tokenizer": true, "revision": true, "download-dir": true, "swap-space": true, "seed": true,
	"enable-auto-tool-choice": true, "tool-call-parser": true, "reasoning-parser": true,
	"chat-template": true, "stream-interval": true, "enable-prompt-tokens-details": true,
}

// flagHint is what to say about an unknown flag name (without dashes) of a
// command with the flags has reports: the warden flag for a foreign name,
// or that an engine flag goes after `--`; "" when it knows nothing.
func flagHint(name string, has func(string) bool, passesExtra bool) string {
	key := strings.ReplaceAll(name, "_", "-")
	for _, f := range foreignFlags[key] {
		if !has(f) {
			continue
		}
		if f == "dp" && has("vllm-dp") && strings.HasPrefix(key, "data-parallel") {
			return "did you mean --dp?\n--dp N: one vLLM server per rank, routed by the warden; " +
				"with --vllm-dp: vLLM's own data parallelism."
		}
		return "did you mean --" + f + "?"
	}
	if passesExtra && (engineFlags[key] || strings.HasPrefix(key, "sim-")) {
		what := "vLLM's"
		if strings.HasPrefix(key, "sim-") {
			what = "the simulator's"
		}
		return "it is " + what + ": engine flags go after --,\nwhich passes them to every engine: warden serve ... -- --" + name + " VALUE"
	}
	return ""
}
