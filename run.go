package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidwall/gjson"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/proxy/panel"
)

// `warden run claude|codex|opencode` starts a coding agent pointed at a
// warden: it reads the served model and the engines' max_model_len from the
// warden, hands the agent the base URL, a key, the model name and the limits
// through the agent's own environment variables or command-line overrides
// (never by editing its config files), runs it in the foreground and exits
// with its exit code. With --serve it first starts a warden for the run and
// stops it when the agent exits.

// dummyKey is the key agents get when the warden needs none: every client
// refuses to start without one.
const dummyKey = "sk-warden-local"

// claudeMinCompactWindow is the least CLAUDE_CODE_AUTO_COMPACT_WINDOW
// Claude Code takes (2.1.332: a smaller value reads as this).
const claudeMinCompactWindow = 100000

// defaultOutputCap is the most output tokens an agent is told by default:
// Claude Code's and opencode's own cap for a model they do not know.
const defaultOutputCap = 32000

// runAgentSpec is one client `warden run` knows.
type runAgentSpec struct {
	Name    string // subcommand, e.g. claude
	Title   string // e.g. Claude Code
	Bin     string // executable looked up on PATH
	Package string // npm package that installs Bin
	Sets    string // for the help: what it is told and how
	// build decides what the agent is given for target t, given the
	// environment it would inherit and the arguments the user passes it.
	build func(t runTarget, environ map[string]string, userArgs []string) launchPlan
}

// runAgents are the clients, in help order.
var runAgents = []runAgentSpec{
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

// runTarget is what an agent is pointed at.
type runTarget struct {
	URL     string // warden base URL, no trailing slash
	Key     string // what the agent sends as its API key
	Model   string // the model name the agent asks for
	Context int    // the engines' max_model_len; 0 when unknown
	Output  int    // output cap to tell the agent; 0 when unknown
	Tools   toolsCheck
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

// argsHaveFlag reports whether args carry flag, alone or as flag=value,
// before a "--".
func argsHaveFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
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
func buildClaude(t runTarget, environ map[string]string, userArgs []string) launchPlan {
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
	if argsHaveFlag(userArgs, "--settings") {
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
func buildCodex(t runTarget, environ map[string]string, userArgs []string) launchPlan {
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
func buildOpencode(t runTarget, environ map[string]string, userArgs []string) launchPlan {
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

func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "url", Value: panel.DefaultURL, EnvVars: []string{"WARDEN_URL"},
			Usage: "base `URL` of the warden the agent uses (the same default as warden status and warden wait)"},
		&cli.StringFlag{Name: "api-key", EnvVars: envVars("API_KEY"),
			Usage: "`KEY` the agent sends: the warden's --api-key (default: a dummy, which a warden without --api-key accepts)"},
		&cli.StringFlag{Name: "model", EnvVars: envVars("RUN_MODEL"),
			Usage: "model `NAME` the agent asks for (default: the one the warden serves)"},
		&cli.IntFlag{Name: "max-output-tokens", EnvVars: envVars("RUN_MAX_OUTPUT_TOKENS"),
			Usage: "output cap (`N` tokens) the agent is told (0: min(32000, max_model_len/4); the engines accept up to max_model_len, but an agent keeps its output cap free in the context)"},
		&cli.StringFlag{Name: "agent-bin", EnvVars: envVars("AGENT_BIN"),
			Usage: "the agent's executable, a `PATH` or a name looked up on PATH (default: claude, codex or opencode)"},
		&cli.DurationFlag{Name: "wait", EnvVars: envVars("RUN_WAIT"),
			Usage: "wait up to `DURATION` for the warden to be ready (0: it must be ready now; with --serve: as long as serve starts)"},
		&cli.StringFlag{Name: "serve", EnvVars: envVars("RUN_SERVE"),
			Usage: "start a warden for this run with these warden serve `ARGS` (one string, e.g. \"--model M --dp 2\"; a loopback --host, a free --port and a --log-dir are added when not given); it gets SIGINT when the agent exits"},
		&cli.StringFlag{Name: "serve-log", EnvVars: envVars("RUN_SERVE_LOG"),
			Usage: "with --serve: `FILE` for the warden's own output (default: serve.log in its --log-dir)"},
		&cli.BoolFlag{Name: "dry-run", EnvVars: envVars("RUN_DRY_RUN"),
			Usage: "print the environment and command line the agent would get, as one shell command, and exit"},
	}
}

// runCommand is `warden run`.
func runCommand() *cli.Command {
	var subs []*cli.Command
	for _, a := range runAgents {
		subs = append(subs, &cli.Command{
			Name:      a.Name,
			Usage:     "run " + a.Title + " against the warden",
			ArgsUsage: "[-- " + a.Bin + " arguments]",
			Description: "Sets: " + a.Sets + "\n\nOptions go before --; everything after -- goes to " + a.Bin +
				" verbatim. Nothing in your config files is changed.",
			Flags:  runFlags(),
			Action: func(c *cli.Context) error { return runAgentCommand(c, a) },
		})
	}
	return &cli.Command{
		Name:  "run",
		Usage: "run a coding agent (claude, codex, opencode) against a warden, told its model and limits",
		UsageText: "warden run claude|codex|opencode [options] [-- agent arguments]\n\n" +
			"   warden run claude -- -p 'fix the failing test'\n" +
			"   warden run codex --url http://gpu-box:8000 -- exec 'add a --verbose flag'\n" +
			"   warden run opencode --serve \"--model Qwen/Qwen3-Coder-30B-A3B-Instruct --dp 2\"",
		Description: "Finds the warden at --url (WARDEN_URL; default " + panel.DefaultURL + "), checks that it is ready, reads the\n" +
			"served model and the engines' max_model_len (GET /warden/status, /v1/models), and runs the agent in the\n" +
			"foreground with the base URL, a key, the model and the limits set through the agent's own environment\n" +
			"variables or command-line overrides; your config files are not touched. It prints to stderr which limits\n" +
			"it told the agent and which it could not. The exit code is the agent's. --serve starts a warden for the run.",
		Subcommands: subs,
	}
}

// runOptions are a run's validated flags.
type runOptions struct {
	URL, Key, Model, AgentBin string
	KeyGiven                  bool
	MaxOutput                 int
	Wait                      time.Duration
	Serve, ServeLog           string
	DryRun                    bool
	Stdin                     io.Reader
	Stdout, Stderr            io.Writer
	Environ                   []string
	UserArgs                  []string
}

// runAgentCommand is the action of `warden run <agent>`.
func runAgentCommand(c *cli.Context, a runAgentSpec) error {
	o := runOptions{
		URL: c.String("url"), Key: c.String("api-key"), Model: c.String("model"), AgentBin: c.String("agent-bin"),
		MaxOutput: c.Int("max-output-tokens"), Wait: c.Duration("wait"), Serve: c.String("serve"),
		ServeLog: c.String("serve-log"), DryRun: c.Bool("dry-run"),
		Stdin: os.Stdin, Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Environ: os.Environ(), UserArgs: c.Args().Slice(),
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Key == "" {
		o.Key = dummyKey
	} else {
		o.KeyGiven = true
	}
	if o.MaxOutput < 0 {
		return cli.Exit(fmt.Sprintf("warden run: --max-output-tokens must be >= 0, got %d", o.MaxOutput), 2)
	}
	// --serve with --url is a contradiction; with WARDEN_URL alone (say,
	// from a shell profile) the run's own warden wins.
	if env, ok := os.LookupEnv("WARDEN_URL"); o.Serve != "" && c.IsSet("url") && (!ok || o.URL != env) {
		return cli.Exit("warden run: --serve starts a warden of its own; drop --url, or drop --serve to use the one at --url", 2)
	}
	ctx := c.Context
	if ctx == nil {
		ctx = context.Background()
	}
	code, err := runAgent(ctx, a, o)
	if err != nil {
		return cli.Exit("warden run: "+err.Error(), code)
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// runAgent does the run and returns the exit code: the agent's, or with an
// error 1 (the warden), 2 (usage), 127 (no agent executable).
func runAgent(ctx context.Context, a runAgentSpec, o runOptions) (int, error) {
	bin, err := findAgent(a, o.AgentBin)
	if err != nil {
		return 127, err
	}
	base, err := panel.NormalizeURL(o.URL)
	if err != nil {
		return 2, err
	}
	if o.Serve != "" {
		if o.DryRun {
			return 2, errors.New("--dry-run with --serve: the model and limits come from the warden, which a dry run does not start; start it, then dry-run with --url")
		}
		sv, err := startRunWarden(ctx, o)
		if err != nil {
			return 1, err
		}
		defer sv.stop(o.Stderr)
		base = sv.url
	} else if err := checkWardenReady(ctx, base, o.Wait); err != nil {
		return 1, err
	}
	t, err := fetchTarget(ctx, base, o.Key, o.Model, o.MaxOutput)
	if err != nil {
		return 1, err
	}
	if t.Tools.Known && !t.Tools.OK && !o.DryRun {
		return 1, fmt.Errorf("the engines behind %s refuse tool calls, which %s sends on every request (%s): %s",
			base, a.Title, t.Tools.How, t.Tools.Fix)
	}
	environ := environMap(o.Environ)
	plan := a.build(t, environ, o.UserArgs)
	argv := append(append([]string{bin}, plan.Args...), o.UserArgs...)
	env := applyPlanEnv(o.Environ, plan)
	reportPlan(o.Stderr, a, t, plan)
	if o.DryRun {
		secret := ""
		if o.KeyGiven {
			secret = o.Key
		}
		fmt.Fprintln(o.Stdout, shellCommand(plan, argv, secret))
		return 0, nil
	}
	return execAgent(argv, env, o)
}

// findAgent resolves the agent's executable.
func findAgent(a runAgentSpec, explicit string) (string, error) {
	name := a.Bin
	if explicit != "" {
		name = explicit
	}
	p, err := exec.LookPath(name)
	if err != nil {
		if explicit != "" {
			return "", fmt.Errorf("--agent-bin %s: %v", explicit, errors.Unwrap(err))
		}
		return "", fmt.Errorf("%s (%s) is not on PATH: install it with `npm install -g %s`, or pass --agent-bin PATH (WARDEN_AGENT_BIN)",
			a.Bin, a.Title, a.Package)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p, nil
}

// checkWardenReady asks base/health once, or polls it for up to wait.
func checkWardenReady(ctx context.Context, base string, wait time.Duration) error {
	client := &http.Client{Timeout: 3 * time.Second}
	h, err := wardenproc.Check(ctx, client, base)
	if err != nil || h.OK() {
		return err
	}
	if wait <= 0 {
		return notReady(base, h)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if h, err = wardenproc.Poll(ctx, client, base, 500*time.Millisecond, nil); err == nil {
		return nil
	} else if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("after waiting %s: %w", wait, notReady(base, h))
}

// notReady says what an answer of base/health other than 200 means and
// what to do.
func notReady(base string, h wardenproc.Health) error {
	switch {
	case h.Err != nil:
		err := h.Err
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the message already
		}
		return fmt.Errorf("no warden answers at %s (%v): start one with `warden serve --model MODEL`, "+
			"or let this command start one with --serve \"--model MODEL ...\", or point --url (WARDEN_URL) at a running one", base, err)
	case h.Status == http.StatusServiceUnavailable:
		why := gjson.GetBytes(h.Body, "error.message").Str
		if why == "" {
			why = strings.TrimSpace(string(h.Body))
		}
		return fmt.Errorf("the warden at %s is not ready (%s): wait for it with `warden wait --url %s`, or pass --wait 10m", base, why, base)
	}
	return fmt.Errorf("%s/health answered %s: is this a warden (`warden serve`)?", base, h.Text)
}

// fetchTarget reads the served model (GET /warden/status) and its
// max_model_len (GET /v1/models, vLLM's field, which the warden passes on).
func fetchTarget(ctx context.Context, base, key, model string, maxOut int) (runTarget, error) {
	t := runTarget{URL: base, Key: key, Model: model}
	client := &http.Client{Timeout: 10 * time.Second}
	st, _, stErr := panel.FetchStatus(ctx, client, base)
	if t.Model == "" {
		t.Model = st.Model
	}
	models, err := getModels(ctx, client, base, key)
	var denied errKeyRefused
	switch {
	case errors.As(err, &denied):
		return t, err // every request of the agent would be refused too
	case err != nil && stErr != nil:
		return t, fmt.Errorf("%v; %v", stErr, err)
	case err != nil:
		models = nil // no limits to tell; the agent still gets the model
	}
	if t.Model == "" && len(models) > 0 {
		t.Model = models[0].id
	}
	if t.Model == "" {
		return t, fmt.Errorf("the warden at %s names no served model (status: %v); pass --model", base, stErr)
	}
	// The engines' limit holds whatever name the agent asks for: the
	// served model's entry, else the asked-for one's, else a lone entry.
	for _, name := range []string{st.Model, t.Model} {
		for _, m := range models {
			if t.Context == 0 && name != "" && m.id == name {
				t.Context = m.maxLen
			}
		}
	}
	if t.Context == 0 && len(models) == 1 {
		t.Context = models[0].maxLen
	}
	t.Output = outputCap(maxOut, t.Context)
	t.Tools = checkTools(ctx, client, base, key, t.Model, st.Engines)
	return t, nil
}

// checkTools tells whether the engines accept tools: `warden serve`'s status
// says how it started them; without that (`warden route`), a request with a
// tool and tool_choice "auto" for one output token asks them. A probe that
// cannot tell (a network error, another failure) leaves it unknown.
func checkTools(ctx context.Context, client *http.Client, base, key, model string, eng *panel.EngineSetup) toolsCheck {
	if eng != nil {
		if eng.AutoToolChoice {
			return toolsCheck{Known: true, OK: true, How: "--tool-call-parser " + eng.ToolCallParser}
		}
		fix := eng.ToolsFix
		if fix == "" {
			fix = "restart the warden with --tools PARSER (docs/tools.md)"
		}
		return toolsCheck{Known: true, How: eng.Tools, Fix: fix}
	}
	body := `{"model":` + strconv.Quote(model) + `,"max_tokens":1,"messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"type":"function","function":{"name":"warden_probe","parameters":{"type":"object","properties":{}}}}],"tool_choice":"auto"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return toolsCheck{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Session-Id", "warden-run-tool-probe")
	resp, err := client.Do(req)
	if err != nil {
		return toolsCheck{}
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := gjson.GetBytes(out, "error.message").Str
	switch {
	case resp.StatusCode == http.StatusOK:
		return toolsCheck{Known: true, OK: true, How: "a probe with tool_choice auto was answered"}
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(msg, "--enable-auto-tool-choice"):
		return toolsCheck{Known: true, How: "the engines refused a probe: " + msg,
			Fix: "start each engine with --enable-auto-tool-choice --tool-call-parser PARSER, or let `warden serve` start them (it sets both; docs/tools.md)"}
	}
	return toolsCheck{}
}

// outputCap is --max-output-tokens (at most the context), else
// min(32000, context/4): an agent keeps its output cap free in the context
// (Claude Code, opencode), so the whole context is no good as a cap.
func outputCap(flag, context int) int {
	switch {
	case flag > 0 && context > 0:
		return min(flag, context)
	case flag > 0:
		return flag
	case context > 0:
		return max(1, min(defaultOutputCap, context/4))
	}
	return 0
}

// errKeyRefused is a 401 from the warden's /v1/models.
type errKeyRefused struct{ base string }

func (e errKeyRefused) Error() string {
	return e.base + "/v1/models answered 401: the warden wants its --api-key; pass the same with --api-key (WARDEN_API_KEY)"
}

type modelEntry struct {
	id     string
	maxLen int
}

// getModels is GET base/v1/models: each entry's id and max_model_len.
func getModels(ctx context.Context, client *http.Client, base, key string) ([]modelEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/v1/models: %w", base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, errKeyRefused{base}
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s/v1/models answered %s", base, resp.Status)
	}
	var out []modelEntry
	for _, m := range gjson.GetBytes(body, "data").Array() {
		out = append(out, modelEntry{id: m.Get("id").Str, maxLen: int(m.Get("max_model_len").Int())})
	}
	return out, nil
}

// environMap turns KEY=VALUE lines into a map (the last one wins, as in exec).
func environMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// applyPlanEnv is environ without the plan's unset and set variables, then the
// set ones.
func applyPlanEnv(environ []string, p launchPlan) []string {
	drop := map[string]bool{}
	for _, k := range p.Unset {
		drop[k] = true
	}
	for _, s := range p.Set {
		drop[s.Key] = true
	}
	var out []string
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	for _, s := range p.Set {
		out = append(out, s.Key+"="+s.Value)
	}
	return out
}

// reportPlan prints, on stderr, where the agent goes and which limits it was
// told and not told.
func reportPlan(w io.Writer, a runAgentSpec, t runTarget, p launchPlan) {
	fmt.Fprintf(w, "warden run: %s -> %s, model %s", a.Title, t.URL, t.Model)
	if t.Context > 0 {
		fmt.Fprintf(w, ", max_model_len %d", t.Context)
	}
	switch {
	case t.Tools.Known && t.Tools.OK:
		fmt.Fprintf(w, ", tools on (%s)", t.Tools.How)
	case t.Tools.Known:
		fmt.Fprintf(w, ", TOOLS OFF: %s", t.Tools.Fix)
	}
	fmt.Fprintln(w)
	if len(p.Told) > 0 {
		fmt.Fprintf(w, "warden run: told %s: %s\n", a.Title, strings.Join(p.Told, "; "))
	}
	for _, n := range p.NotTold {
		fmt.Fprintf(w, "warden run: not told %s: %s\n", a.Title, n)
	}
	for _, k := range p.Kept {
		fmt.Fprintf(w, "warden run: kept your %s=%s\n", k.Key, k.Value)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "warden run: %s\n", n)
	}
}

// shellCommand is the run as one shell command: env -u ... KEY=VALUE ...
// argv. A key the user gave is shown as <api-key>.
func shellCommand(p launchPlan, argv []string, secret string) string {
	hide := func(s string) string {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "<api-key>")
		}
		return shellQuote(s)
	}
	parts := []string{"env"}
	for _, k := range p.Unset {
		parts = append(parts, "-u "+k)
	}
	for _, s := range p.Set {
		parts = append(parts, s.Key+"="+hide(s.Value))
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = hide(a)
	}
	parts = append(parts, strings.Join(words, " "))
	return strings.Join(parts, " \\\n  ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// splitWords splits s as a POSIX shell would split words: blanks separate,
// '...' is literal, "..." allows \" \\ \$ \`, a backslash outside quotes
// escapes the next character (a backslash-newline is nothing).
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("a trailing backslash")
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("an unclosed '")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`an unclosed "`)
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// execAgent runs the agent in the foreground and returns its exit code.
// The agent stays in warden's process group, so a Ctrl-C or Ctrl-\ on the
// terminal reaches it (and its own children) directly, as without warden;
// warden ignores those itself. A signal sent to warden alone (SIGTERM,
// SIGHUP, or SIGINT/SIGQUIT when warden is not the terminal's foreground
// job, e.g. from `timeout` or a supervisor) is passed on to the agent.
func execAgent(argv []string, env []string, o runOptions) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if (s == syscall.SIGINT || s == syscall.SIGQUIT) && terminalForeground() {
					continue // the terminal sent it to the agent too
				}
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	return agentExitCode(cmd.ProcessState, err)
}

// agentExitCode is a finished process's exit code, 128+N for a death by signal N.
func agentExitCode(ps *os.ProcessState, err error) (int, error) {
	if ps == nil {
		return 1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// terminalForeground reports whether warden's process group is the
// foreground group of its controlling terminal: then a SIGINT it gets came
// from the terminal, which sent it to the whole group.
func terminalForeground() bool {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer f.Close()
	pg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// servedWarden is a `warden serve` started by --serve.
type servedWarden struct {
	proc *wardenproc.Proc
	url  string
}

// startRunWarden starts `warden serve` with the --serve arguments (plus a
// loopback --host, a free --port and a --log-dir where not given) in its
// own process group, so that the terminal's Ctrl-C goes to the agent only,
// and waits until it is ready.
func startRunWarden(ctx context.Context, o runOptions) (*servedWarden, error) {
	words, err := splitWords(o.Serve)
	if err != nil {
		return nil, fmt.Errorf("--serve %q: %v", o.Serve, err)
	}
	args, host, port, logDir, err := runServeArgs(words)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--serve: finding the warden executable: %w", err)
	}
	logPath := o.ServeLog
	if logPath == "" {
		logPath = filepath.Join(logDir, "serve.log")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("--serve: %w", err)
	}
	fmt.Fprintf(o.Stderr, "warden run: starting warden serve %s (log %s)\n", strings.Join(args, " "), logPath)
	proc, err := wardenproc.Start(self, append([]string{"serve"}, args...), logPath) // its own group; SIGTERM to it if this process dies
	if err != nil {
		return nil, fmt.Errorf("--serve: %w", err)
	}
	sv := &servedWarden{proc: proc, url: "http://" + net.JoinHostPort(displayHost(host), strconv.Itoa(port))}

	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if o.Wait > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(sctx, o.Wait)
		defer cancel()
	}
	_, err = wardenproc.Poll(sctx, &http.Client{Timeout: 3 * time.Second}, sv.url, 250*time.Millisecond, proc.Done())
	switch {
	case err == nil:
		fmt.Fprintf(o.Stderr, "warden run: the warden is ready at %s\n", sv.url)
		return sv, nil
	case errors.Is(err, wardenproc.ErrExited):
		return nil, fmt.Errorf("warden serve stopped before it was ready (%v); the end of %s:\n%s", proc.Err(), logPath, proc.Tail(15))
	}
	why := "interrupted"
	if ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		why = "not ready after --wait " + o.Wait.String()
	}
	sv.stop(o.Stderr)
	return nil, fmt.Errorf("warden serve %s; stopped it (log %s)", why, logPath)
}

// stop sends the warden SIGINT (it drains and stops its engines) and waits;
// after two minutes it kills its process group.
func (sv *servedWarden) stop(w io.Writer) {
	if sv.proc.Exited() {
		return
	}
	fmt.Fprintf(w, "warden run: stopping the warden started for this run (log %s)\n", sv.proc.Log())
	sv.proc.Stop(2 * time.Minute)
}

// runServeArgs completes the --serve words: --host 127.0.0.1 and a free --port
// and a --log-dir when they are not given (inserted before a "--", whose
// rest goes to the engines). It returns the host, port and log dir the
// warden will use.
func runServeArgs(words []string) (args []string, host string, port int, logDir string, err error) {
	end := len(words)
	for i, w := range words {
		if w == "--" {
			end = i
			break
		}
	}
	value := func(flag string) (string, bool) { // -flag V, --flag V, -flag=V, --flag=V
		for i := 0; i < end; i++ {
			if !strings.HasPrefix(words[i], "-") {
				continue
			}
			w := strings.TrimPrefix(strings.TrimPrefix(words[i], "-"), "-")
			if w == flag && i+1 < end {
				return words[i+1], true
			}
			if v, ok := strings.CutPrefix(w, flag+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	var extra []string
	host, ok := value("host")
	if !ok {
		host = "127.0.0.1"
		extra = append(extra, "--host", host)
	}
	if p, ok := value("port"); ok {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return nil, "", 0, "", fmt.Errorf("--serve: --port %q is not a TCP port", p)
		}
	} else {
		if port, err = ports.Loopback(); err != nil {
			return nil, "", 0, "", fmt.Errorf("--serve: finding a free port: %w", err)
		}
		extra = append(extra, "--port", strconv.Itoa(port))
	}
	if logDir, ok = value("log-dir"); !ok {
		logDir = defaultLogDir(time.Now())
		extra = append(extra, "--log-dir", logDir)
	}
	args = append(append(append([]string{}, words[:end]...), extra...), words[end:]...)
	return args, host, port, logDir, nil
}
