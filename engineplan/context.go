package engineplan

import (
	"fmt"

	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/modelinfo"
)

// The context an engine serves at. vLLM serves a model at its config's
// context unless told otherwise (Qwen3-4B-Instruct-2507: 262,144 tokens),
// and refuses to start when one sequence of it does not fit the KV cache
// ("To serve at least one request with the model's max seq len ..."): on a
// 16 GB card every rank of the mission's line would fail after loading its
// weights. vLLM 0.14.0 and later take --max-model-len auto (or -1): the
// model's context when it fits, else the longest the KV cache holds
// (v1/core/kv_cache_utils.py, _auto_fit_max_model_len; read from the PyPI
// wheels: 0.13.0 lacks it, 0.14.0 has it). The warden passes it unless the
// user set a --max-model-len after --.

// AutoMaxModelLenSince is the first vLLM release that takes --max-model-len
// auto.
const AutoMaxModelLenSince = "0.14.0"

// ContextChoice is what ChooseContext decided: the --max-model-len the
// warden passes ("" none) and a line for the start log.
type ContextChoice struct {
	MaxModelLen string
	Info        string
}

// ChooseContext decides the engines' --max-model-len: the user's after --
// (left alone), else auto for the simulator and for a vLLM that has it. An
// older or unknown vLLM gets none: it serves the model's own context, and a
// rank that cannot hold it fails with vLLM's estimate of what fits, which
// the start error turns into the --max-model-len to type (Hint).
func ChooseContext(extra []string, version string, sim bool, files modelinfo.Files) ContextChoice {
	own := ""
	if files.MaxLen > 0 {
		own = fmt.Sprintf(", %d tokens", files.MaxLen)
	}
	if v, ok := argv.Value(extra, "--max-model-len"); ok {
		return ContextChoice{Info: "context: --max-model-len " + v + " (given after --)"}
	}
	if v, ok := argv.Value(extra, "--max_model_len"); ok {
		return ContextChoice{Info: "context: --max_model_len " + v + " (given after --)"}
	}
	if sim {
		version = "0.32.0"
	}
	if at, ok := VersionAtLeast(version, 0, 14, 0); ok && at {
		return ContextChoice{MaxModelLen: "auto", Info: "context: --max-model-len auto (each engine serves the model's own " +
			"context" + own + " where it fits, else the longest its KV cache holds; set one with -- --max-model-len N)"}
	}
	why := "vLLM " + version + " predates"
	if version == "" {
		why = "the vLLM version is not known, so the warden does not pass"
	}
	return ContextChoice{Info: fmt.Sprintf("context: the model's own%s: %s --max-model-len auto (vLLM %s); "+
		"a rank whose KV cache cannot hold it says what fits", own, why, AutoMaxModelLenSince)}
}
