// Package run is `warden run claude|codex|opencode`: it starts a coding
// agent pointed at a warden. It reads the served model and the engines'
// max_model_len from the warden, hands the agent the base URL, a key, the
// model name and the limits through the agent's own environment variables
// or command-line overrides (never by editing its config files; agents.go),
// runs it in the foreground and exits with its exit code (exec.go). With
// --serve it first starts a warden for the run and stops it when the agent
// exits (serve.go).
package run

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/lmwarden/warden/internal/argv"
)

// dummyKey is the key agents get when the warden needs none: every client
// refuses to start without one.
const dummyKey = "sk-warden-local"

// claudeMinCompactWindow is the least CLAUDE_CODE_AUTO_COMPACT_WINDOW
// Claude Code takes (2.1.332: a smaller value reads as this).
const claudeMinCompactWindow = 100000

// defaultOutputCap is the most output tokens an agent is told by default:
// Claude Code's and opencode's own cap for a model they do not know.
const defaultOutputCap = 32000

// Agent is one client `warden run` knows.
type Agent struct {
	Name    string // subcommand, e.g. claude
	Title   string // e.g. Claude Code
	Bin     string // executable looked up on PATH
	Package string // npm package that installs Bin
	Sets    string // for the help: what it is told and how
	// build decides what the agent is given for target t, given the
	// environment it would inherit and the arguments the user passes it.
	build func(t target, environ map[string]string, userArgs []string) launchPlan
}

// Agents are the clients, in help order.
var Agents = []Agent{
	{Name: "claude", Title: "Claude Code", Bin: "claude", Package: "@anthropic-ai/claude-code", build: buildClaude,
		Sets: "ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN (ANTHROPIC_API_KEY removed), ANTHROPIC_MODEL and the\n" +
			"opus/sonnet/haiku/subagent model variables = the served model, CLAUDE_CODE_MAX_CONTEXT_TOKENS (and\n" +
			"from 100k up CLAUDE_CODE_AUTO_COMPACT_WINDOW) = max_model_len, CLAUDE_CODE_MAX_OUTPUT_TOKENS, non-essential\n" +
			"traffic off; the same variables again in a --settings layer so that settings files cannot override them."},
	{Name: "codex", Title: "Codex", Bin: "codex", Package: "@openai/codex", build: buildCodex,
		Sets: "-c overrides: a provider \"warden\" (Responses API at URL/v1, key from WARDEN_API_KEY), model = the\n" +
			"served model, model_context_window = max_model_len, analytics and the update check off.\n" +
			"Codex has no output-limit setting, so the output cap is not told."},
	{Name: "opencode", Title: "opencode", Bin: "opencode", Package: "opencode-ai", build: buildOpencode,
		Sets: "OPENCODE_CONFIG_CONTENT with a provider \"warden\" (@ai-sdk/openai-compatible at URL/v1) whose model\n" +
			"declares limit.context = max_model_len and limit.output, model and small_model set to it; autoupdate,\n" +
			"sharing and the models.dev fetch off."},
}

// target is what an agent is pointed at.
type target struct {
	URL     string // warden base URL, no trailing slash
	Key     string // what the agent sends as its API key
	Model   string // the model name the agent asks for
	Context int    // the engines' max_model_len; 0 when unknown
	Output  int    // output cap to tell the agent; 0 when unknown
	Tools   toolsCheck
	// Simulator: the engines are the simulator, and what its answers are
	// (the warden's status says it, in lines); nil for real engines.
	Simulator []string
}

// toolsCheck is whether the engines accept the tool requests every agent
// sends (tool_choice "auto"), read from the warden's status (how `warden
// serve` started them) or, where the status does not say (`warden route`),
// from a one-token probe.
type toolsCheck struct {
	Known, OK bool
	How       string // "hermes, from the status", "probe: ..."
	Fix       string // when !OK: what to change
}

// envSet is one environment variable an agent is given.
type envSet struct{ Key, Value string }

// launchPlan is everything an agent is given on top of the environment it
// inherits.
type launchPlan struct {
	Set     []envSet // variables set, in order
	Unset   []string // variables removed
	Kept    []envSet // limit variables already in the environment, left as they were
	Args    []string // arguments before the user's
	Told    []string // limits told, for stderr: "context window 45856 (VAR)"
	NotTold []string // limits not told and why
	Notes   []string // anything else worth a line on stderr
}

// set gives key=value; a limit (userWins) already in the environment is
// kept as the user set it.
func (p *launchPlan) set(environ map[string]string, key, value string, userWins bool) {
	if old, ok := environ[key]; ok && userWins && old != "" {
		p.Kept = append(p.Kept, envSet{key, old})
		return
	}
	p.Set = append(p.Set, envSet{key, value})
}

// Claude Code (verified with 2.1.332): for a model name it does not know,
// CLAUDE_CODE_MAX_CONTEXT_TOKENS is its context window (its own default is
// 1M); CLAUDE_CODE_AUTO_COMPACT_WINDOW caps the window compaction is planned
// against for any model, a Claude model of its own included, but reads
// values under 100k as 100k, so it is set only from 100k up;
// CLAUDE_CODE_MAX_OUTPUT_TOKENS is the max_tokens it asks for. The aliases
// (opus, sonnet, haiku, the subagents' model) all name the served model.
// Variables in a settings file's "env" override the process environment,
// and a --settings layer overrides settings files; so what warden sets is
// given both ways.
func buildClaude(t target, environ map[string]string, userArgs []string) launchPlan {
	var p launchPlan
	p.set(environ, "ANTHROPIC_BASE_URL", t.URL, false)
	p.set(environ, "ANTHROPIC_AUTH_TOKEN", t.Key, false)
	if _, ok := environ["ANTHROPIC_API_KEY"]; ok {
		p.Unset = append(p.Unset, "ANTHROPIC_API_KEY")
		p.Notes = append(p.Notes, "ANTHROPIC_API_KEY removed for the agent: the warden gets ANTHROPIC_AUTH_TOKEN, and a real key is not sent to it")
	}
	for _, k := range []string{"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"} {
		p.set(environ, k, t.Model, false)
	}
	for _, k := range []string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER"} {
		p.set(environ, k, "1", false)
	}
	switch {
	case t.Context >= claudeMinCompactWindow:
		ctx := strconv.Itoa(t.Context)
		p.set(environ, "CLAUDE_CODE_MAX_CONTEXT_TOKENS", ctx, true)
		p.set(environ, "CLAUDE_CODE_AUTO_COMPACT_WINDOW", ctx, true)
		p.Told = append(p.Told, fmt.Sprintf("context window %d (CLAUDE_CODE_MAX_CONTEXT_TOKENS, CLAUDE_CODE_AUTO_COMPACT_WINDOW)", t.Context))
	case t.Context > 0:
		p.set(environ, "CLAUDE_CODE_MAX_CONTEXT_TOKENS", strconv.Itoa(t.Context), true)
		p.Told = append(p.Told, fmt.Sprintf("context window %d (CLAUDE_CODE_MAX_CONTEXT_TOKENS)", t.Context))
	default:
		p.NotTold = append(p.NotTold, "context window: the warden's /v1/models names no max_model_len (Claude Code assumes 1M tokens for a model it does not know)")
	}
	if t.Output > 0 {
		p.set(environ, "CLAUDE_CODE_MAX_OUTPUT_TOKENS", strconv.Itoa(t.Output), true)
		p.Told = append(p.Told, fmt.Sprintf("output cap %d (CLAUDE_CODE_MAX_OUTPUT_TOKENS)", t.Output))
	} else {
		p.NotTold = append(p.NotTold, "output cap: unknown without max_model_len (pass --max-output-tokens)")
	}
	if flags, _, _ := argv.Split(userArgs); argv.Has(flags, "--settings") {
		p.Notes = append(p.Notes, "your --settings replaces warden's settings layer: an \"env\" in your settings files may override what warden set")
		return p
	}
	env := map[string]string{}
	for _, s := range p.Set {
		env[s.Key] = s.Value
	}
	if t.Key != dummyKey {
		delete(env, "ANTHROPIC_AUTH_TOKEN") // a real key stays out of argv (ps shows it); the environment has it
	}
	b, _ := marshalJSON(map[string]any{"env": env})
	p.Args = []string{"--settings", string(b)}
	return p
}

// Codex (verified with 0.171.0): -c key=value overrides win over
// config.toml and profiles and are given before the user's arguments, so a
// -c of the user's wins over warden's. The user's CODEX_HOME (auth, history,
// config) is left as it is; sessions started through warden land in its
// history like any other, so `exec resume --last` finds them. Codex compacts
// at 90% of model_context_window unless model_auto_compact_token_limit says
// otherwise; it has no output-limit key and its Responses requests carry no
// max_output_tokens.
func buildCodex(t target, environ map[string]string, userArgs []string) launchPlan {
	var p launchPlan
	p.set(environ, "WARDEN_API_KEY", t.Key, false)
	kv := func(k, v string) { p.Args = append(p.Args, "-c", k+"="+v) }
	kv("model_provider", tomlString("warden"))
	kv("model_providers.warden.name", tomlString("warden"))
	kv("model_providers.warden.base_url", tomlString(t.URL+"/v1"))
	kv("model_providers.warden.wire_api", tomlString("responses"))
	kv("model_providers.warden.env_key", tomlString("WARDEN_API_KEY"))
	kv("model", tomlString(t.Model))
	if t.Context > 0 {
		kv("model_context_window", strconv.Itoa(t.Context))
		p.Told = append(p.Told, fmt.Sprintf("context window %d (-c model_context_window; Codex compacts at 90%% of it)", t.Context))
	} else {
		p.NotTold = append(p.NotTold, "context window: the warden's /v1/models names no max_model_len")
	}
	kv("analytics.enabled", "false")
	kv("check_for_update_on_startup", "false")
	p.NotTold = append(p.NotTold, "output cap: Codex has no setting for it (its requests carry no max_output_tokens, so an answer may run to the end of the context)")
	return p
}

// opencode (verified with 1.18.33): OPENCODE_CONFIG_CONTENT is merged last,
// over the global and project configs. A model of a custom provider
// declares its limits; opencode sends limit.output as max_tokens and
// compacts before limit.context minus that. An OPENCODE_CONFIG_CONTENT
// already in the environment is kept, with the warden provider added and
// model/small_model set only where it has none.
func buildOpencode(t target, environ map[string]string, userArgs []string) launchPlan {
	var p launchPlan
	model := map[string]any{"name": t.Model}
	switch {
	case t.Context > 0 && t.Output > 0:
		model["limit"] = map[string]any{"context": t.Context, "output": t.Output}
		p.Told = append(p.Told, fmt.Sprintf("context window %d and output cap %d (limit.context, limit.output of model warden/%s)", t.Context, t.Output, t.Model))
	default:
		p.NotTold = append(p.NotTold, "context window and output cap: the warden's /v1/models names no max_model_len (opencode then assumes none)")
	}
	cfg := map[string]any{}
	if old := environ["OPENCODE_CONFIG_CONTENT"]; old != "" {
		if err := json.Unmarshal([]byte(old), &cfg); err != nil || cfg == nil {
			cfg = map[string]any{}
			p.Notes = append(p.Notes, "your OPENCODE_CONFIG_CONTENT is not a JSON object; warden's replaces it")
		} else {
			p.Notes = append(p.Notes, "your OPENCODE_CONFIG_CONTENT is kept, with the warden provider added")
		}
	}
	providers, _ := cfg["provider"].(map[string]any)
	if providers == nil {
		providers = map[string]any{}
	}
	providers["warden"] = map[string]any{
		"npm": "@ai-sdk/openai-compatible", "name": "warden",
		"options": map[string]any{"baseURL": t.URL + "/v1", "apiKey": t.Key},
		"models":  map[string]any{t.Model: model},
	}
	cfg["provider"] = providers
	if _, ok := cfg["$schema"]; !ok {
		cfg["$schema"] = "https://opencode.ai/config.json"
	}
	for k, v := range map[string]any{"model": "warden/" + t.Model, "small_model": "warden/" + t.Model,
		"autoupdate": false, "share": "disabled"} {
		if _, ok := cfg[k]; !ok {
			cfg[k] = v
		}
	}
	b, _ := marshalJSON(cfg)
	p.set(environ, "OPENCODE_CONFIG_CONTENT", string(b), false)
	for _, k := range []string{"OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_SHARE", "OPENCODE_DISABLE_MODELS_FETCH"} {
		p.set(environ, k, "1", false)
	}
	return p
}

// marshalJSON is json.Marshal without HTML escaping.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// tomlString quotes s as a TOML basic string (a JSON string is one).
func tomlString(s string) string {
	b, _ := marshalJSON(s)
	return string(b)
}
