package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/router/schema"
)

// Options are a run's settings: its flags, and what the agent inherits.
type Options struct {
	URL, Key, Model, AgentBin string // --url, --api-key ("": none needed), --model, --agent-bin
	URLFlag                   bool   // --url given as a flag (not only WARDEN_URL from the environment)
	KeyGiven                  bool   // Key is the user's (Main sets it)
	MaxOutput                 int    // --max-output-tokens
	Wait                      time.Duration
	Serve, ServeLog           string // --serve, --serve-log
	DryRun                    bool
	Stdin                     io.Reader
	Stdout, Stderr            io.Writer
	Environ                   []string // the environment the agent inherits
	UserArgs                  []string // the agent's own arguments (after --)
}

// Main is `warden run <agent>`. The error carries the exit status: the
// agent's own (an empty message), or 1 (the warden), 2 (usage), 127 (no
// agent executable) with what went wrong.
func Main(ctx context.Context, a Agent, o Options) error {
	if o.Key == "" {
		o.Key = dummyKey
	} else {
		o.KeyGiven = true
	}
	if o.MaxOutput < 0 {
		return exit.Newf(2, "warden run: --max-output-tokens must be >= 0, got %d", o.MaxOutput)
	}
	// --serve with --url is a contradiction; with WARDEN_URL alone (say,
	// from a shell profile) the run's own warden wins.
	if o.Serve != "" && o.URLFlag {
		return exit.New(2, "warden run: --serve starts a warden of its own; drop --url, or drop --serve to use the one at --url")
	}
	code, err := runAgent(ctx, a, o)
	if err != nil {
		return exit.New(code, "warden run: "+err.Error())
	}
	if code != 0 {
		return exit.New(code, "")
	}
	return nil
}

// runAgent does the run and returns the exit code: the agent's, or with an
// error 1 (the warden), 2 (usage), 127 (no agent executable).
func runAgent(ctx context.Context, a Agent, o Options) (int, error) {
	bin, err := findAgent(a, o.AgentBin)
	if err != nil {
		return 127, err
	}
	base, err := schema.NormalizeURL(o.URL)
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
func findAgent(a Agent, explicit string) (string, error) {
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
func fetchTarget(ctx context.Context, base, key, model string, maxOut int) (target, error) {
	t := target{URL: base, Key: key, Model: model}
	client := &http.Client{Timeout: 10 * time.Second}
	st, _, stErr := schema.Fetch(ctx, client, base)
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
	if st.Engines != nil {
		t.Simulator = st.Engines.Simulator
	}
	return t, nil
}

// checkTools tells whether the engines accept tools: `warden serve`'s status
// says how it started them; without that (`warden route`), a request with a
// tool and tool_choice "auto" for one output token asks them. A probe that
// cannot tell (a network error, another failure) leaves it unknown.
func checkTools(ctx context.Context, client *http.Client, base, key, model string, eng *schema.EngineSetup) toolsCheck {
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
func reportPlan(w io.Writer, a Agent, t target, p launchPlan) {
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
	for _, line := range t.Simulator {
		fmt.Fprintf(w, "warden run: %s\n", line)
	}
}
