package run

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/simproc"
)

// fakeRunWarden serves what `warden run` reads: /health (health), the status
// with the served model, and /v1/models with maxLen (0: no max_model_len,
// as an engine other than vLLM would answer). A non-empty key is required
// on /v1/models, as `warden serve --api-key` does.
func fakeRunWarden(t *testing.T, model string, maxLen, health int, key string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(health)
			if health != http.StatusOK {
				_, _ = w.Write([]byte(`{"error":{"message":"starting: engines are loading"}}`))
			}
		case "/warden/status":
			_ = json.NewEncoder(w).Encode(map[string]any{"model": model, "policy": "adaptive", "replicas": []any{}})
		case "/v1/models":
			if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			m := map[string]any{"id": model, "object": "model", "parent": nil}
			if maxLen > 0 {
				m["max_model_len"] = maxLen
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{m}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fakeAgent writes an executable shell script and returns its path.
func fakeAgent(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// dryRun is the command line a dry run prints, split back into the
// variables it sets, the ones it unsets and the argv.
type dryRun struct {
	set   map[string]string
	unset []string
	argv  []string
}

func parseDryRun(t *testing.T, out string) dryRun {
	t.Helper()
	words, err := splitWords(out)
	if err != nil {
		t.Fatalf("dry-run output does not split as shell words: %v\n%s", err, out)
	}
	if len(words) == 0 || words[0] != "env" {
		t.Fatalf("dry-run output does not start with env:\n%s", out)
	}
	d := dryRun{set: map[string]string{}}
	i := 1
	for ; i < len(words); i++ {
		if words[i] == "-u" && i+1 < len(words) {
			d.unset = append(d.unset, words[i+1])
			i++
			continue
		}
		k, v, ok := strings.Cut(words[i], "=")
		if !ok || strings.Contains(k, "/") {
			break
		}
		d.set[k] = v
	}
	d.argv = words[i:]
	return d
}

func runDry(t *testing.T, name, url string, environ []string, args ...string) (dryRun, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := Options{URL: url, Key: dummyKey, AgentBin: fakeAgent(t, "exit 0"), DryRun: true,
		Stdout: &out, Stderr: &errOut, Environ: environ, UserArgs: args}
	code, err := runAgent(context.Background(), agentByName(t, name), o)
	if err != nil || code != 0 {
		t.Fatalf("dry run: code %d, %v\n%s", code, err, errOut.String())
	}
	return parseDryRun(t, out.String()), errOut.String()
}

func agentByName(t *testing.T, name string) Agent {
	t.Helper()
	for _, a := range Agents {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no agent %q", name)
	return Agent{}
}

// TestRunPlans checks, per client, the environment and argv built for a
// warden serving demo/model with a given max_model_len.
func TestRunPlans(t *testing.T) {
	type want struct {
		set      map[string]string // must be set to these values
		notSet   []string          // must not be set
		unset    []string
		argvHead []string // argv after the binary, before the user's args (checked when non-nil)
		stderr   []string // substrings
	}
	cases := []struct {
		name, agent string
		maxLen      int
		environ     []string
		args        []string
		want        want
	}{
		{"claude small context", "claude", 40960, []string{"HOME=/home/u", "ANTHROPIC_API_KEY=sk-ant-real"}, []string{"-p", "hi"}, want{
			set: map[string]string{"HOME": "/home/u", "ANTHROPIC_AUTH_TOKEN": dummyKey, "ANTHROPIC_MODEL": "demo/model",
				"ANTHROPIC_DEFAULT_OPUS_MODEL": "demo/model", "ANTHROPIC_DEFAULT_SONNET_MODEL": "demo/model",
				"ANTHROPIC_DEFAULT_HAIKU_MODEL": "demo/model", "CLAUDE_CODE_SUBAGENT_MODEL": "demo/model",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
				"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "40960", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "10240"},
			notSet: []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_AUTO_COMPACT_WINDOW"},
			unset:  []string{"ANTHROPIC_API_KEY"},
			stderr: []string{"told Claude Code: context window 40960 (CLAUDE_CODE_MAX_CONTEXT_TOKENS); output cap 10240", "ANTHROPIC_API_KEY removed"},
		}},
		{"claude large context", "claude", 262144, nil, nil, want{
			set: map[string]string{"CLAUDE_CODE_MAX_CONTEXT_TOKENS": "262144", "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "262144",
				"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "32000"},
		}},
		{"claude keeps the user's limit", "claude", 40960, []string{"CLAUDE_CODE_MAX_OUTPUT_TOKENS=999"}, nil, want{
			set:    map[string]string{"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "999"},
			stderr: []string{"kept your CLAUDE_CODE_MAX_OUTPUT_TOKENS=999"},
		}},
		{"claude without max_model_len", "claude", 0, nil, nil, want{
			notSet: []string{"CLAUDE_CODE_MAX_CONTEXT_TOKENS", "CLAUDE_CODE_MAX_OUTPUT_TOKENS"},
			stderr: []string{"not told Claude Code: context window", "not told Claude Code: output cap"},
		}},
		{"claude with the user's --settings", "claude", 40960, nil, []string{"--settings", "my.json", "-p", "x"}, want{
			argvHead: []string{},
			stderr:   []string{"your --settings replaces warden's settings layer"},
		}},
		{"codex", "codex", 40960, []string{"OPENAI_API_KEY=sk-real"}, []string{"exec", "hi"}, want{
			set: map[string]string{"WARDEN_API_KEY": dummyKey, "OPENAI_API_KEY": "sk-real"},
			argvHead: []string{"-c", `model_provider="warden"`, "-c", `model_providers.warden.name="warden"`,
				"-c", `model_providers.warden.base_url="URL/v1"`, "-c", `model_providers.warden.wire_api="responses"`,
				"-c", `model_providers.warden.env_key="WARDEN_API_KEY"`, "-c", `model="demo/model"`,
				"-c", "model_context_window=40960", "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"},
			stderr: []string{"told Codex: context window 40960", "not told Codex: output cap"},
		}},
		{"codex without max_model_len", "codex", 0, nil, nil, want{
			stderr: []string{"not told Codex: context window", "not told Codex: output cap"},
		}},
		{"opencode", "opencode", 40960, nil, []string{"run", "hi"}, want{
			set:      map[string]string{"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"},
			argvHead: []string{},
			stderr:   []string{"told opencode: context window 40960 and output cap 10240"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeRunWarden(t, "demo/model", tc.maxLen, http.StatusOK, "")
			d, stderr := runDry(t, tc.agent, srv.URL, tc.environ, tc.args...)
			env := environMap(applyPlanEnv(tc.environ, launchPlan{Set: envSets(d.set), Unset: d.unset}))
			for k, v := range tc.want.set {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			for _, k := range tc.want.notSet {
				if _, ok := env[k]; ok {
					t.Errorf("%s is set (%q), want it unset", k, env[k])
				}
			}
			if diff := cmp.Diff(tc.want.unset, d.unset); tc.want.unset != nil && diff != "" {
				t.Errorf("unset (-want +got):\n%s", diff)
			}
			switch tc.agent {
			case "claude":
				if env["ANTHROPIC_BASE_URL"] != srv.URL {
					t.Errorf("ANTHROPIC_BASE_URL = %q, want %q", env["ANTHROPIC_BASE_URL"], srv.URL)
				}
				checkClaudeSettings(t, d, tc.args)
			case "opencode":
				checkOpencodeConfig(t, env["OPENCODE_CONFIG_CONTENT"], srv.URL, tc.maxLen)
			}
			if tc.want.argvHead != nil {
				head := d.argv[1 : len(d.argv)-len(tc.args)]
				want := make([]string, len(tc.want.argvHead))
				for i, w := range tc.want.argvHead {
					want[i] = strings.ReplaceAll(w, "URL", srv.URL)
				}
				if diff := cmp.Diff(want, head); diff != "" {
					t.Errorf("argv before the user's (-want +got):\n%s", diff)
				}
			}
			if got := d.argv[len(d.argv)-len(tc.args):]; !cmp.Equal(got, tc.args) && len(tc.args) > 0 {
				t.Errorf("argv ends %q, want the user's %q", got, tc.args)
			}
			for _, s := range tc.want.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
		})
	}
}

func envSets(m map[string]string) []envSet {
	var out []envSet
	for k, v := range m {
		out = append(out, envSet{k, v})
	}
	return out
}

// checkClaudeSettings: the --settings layer carries every variable set.
func checkClaudeSettings(t *testing.T, d dryRun, userArgs []string) {
	t.Helper()
	if flags, _, _ := argv.Split(userArgs); argv.Has(flags, "--settings") {
		if len(d.argv) != 1+len(userArgs) {
			t.Errorf("with the user's --settings, argv = %q, want the user's alone", d.argv)
		}
		return
	}
	if len(d.argv) < 3 || d.argv[1] != "--settings" {
		t.Fatalf("argv = %q, want --settings JSON first", d.argv)
	}
	var s struct{ Env map[string]string }
	if err := json.Unmarshal([]byte(d.argv[2]), &s); err != nil {
		t.Fatalf("--settings %q: %v", d.argv[2], err)
	}
	if _, ok := s.Env["ANTHROPIC_AUTH_TOKEN"]; !ok {
		t.Error("the dummy key is not in the --settings layer")
	}
	if diff := cmp.Diff(d.set, s.Env); diff != "" {
		t.Errorf("--settings env differs from the environment set (-env +settings):\n%s", diff)
	}
}

// checkOpencodeConfig: the provider, the model and its limits.
func checkOpencodeConfig(t *testing.T, content, url string, maxLen int) {
	t.Helper()
	var cfg struct {
		Model      string `json:"model"`
		SmallModel string `json:"small_model"`
		Share      string `json:"share"`
		Autoupdate *bool  `json:"autoupdate"`
		Provider   map[string]struct {
			NPM     string `json:"npm"`
			Options struct {
				BaseURL string `json:"baseURL"`
				APIKey  string `json:"apiKey"`
			} `json:"options"`
			Models map[string]struct {
				Limit *struct{ Context, Output int } `json:"limit"`
			} `json:"models"`
		} `json:"provider"`
	}
	if err := json.Unmarshal([]byte(content), &cfg); err != nil {
		t.Fatalf("OPENCODE_CONFIG_CONTENT %q: %v", content, err)
	}
	p := cfg.Provider["warden"]
	if cfg.Model != "warden/demo/model" || cfg.SmallModel != "warden/demo/model" || cfg.Share != "disabled" ||
		cfg.Autoupdate == nil || *cfg.Autoupdate || p.NPM != "@ai-sdk/openai-compatible" ||
		p.Options.BaseURL != url+"/v1" || p.Options.APIKey != dummyKey {
		t.Errorf("opencode config = %s", content)
	}
	m, ok := p.Models["demo/model"]
	switch {
	case !ok:
		t.Errorf("no model demo/model in %s", content)
	case maxLen > 0 && (m.Limit == nil || m.Limit.Context != maxLen || m.Limit.Output != outputCap(0, maxLen)):
		t.Errorf("limit of demo/model = %+v, want context %d output %d", m.Limit, maxLen, outputCap(0, maxLen))
	case maxLen == 0 && m.Limit != nil:
		t.Errorf("limit %+v without a max_model_len", m.Limit)
	}
}

func TestRunOpencodeKeepsTheUsersConfigContent(t *testing.T) {
	srv := fakeRunWarden(t, "demo/model", 40960, http.StatusOK, "")
	old := `{"model":"other/m","provider":{"other":{"npm":"x"}},"theme":"dark"}`
	d, _ := runDry(t, "opencode", srv.URL, []string{"OPENCODE_CONFIG_CONTENT=" + old})
	var cfg map[string]any
	if err := json.Unmarshal([]byte(d.set["OPENCODE_CONFIG_CONTENT"]), &cfg); err != nil {
		t.Fatal(err)
	}
	prov, _ := cfg["provider"].(map[string]any)
	if cfg["model"] != "other/m" || cfg["theme"] != "dark" || prov["other"] == nil || prov["warden"] == nil ||
		cfg["small_model"] != "warden/demo/model" {
		t.Errorf("merged config = %v", cfg)
	}
}

func TestRunModelOverrideKeepsTheEnginesLimit(t *testing.T) {
	srv := fakeRunWarden(t, "demo/model", 40960, http.StatusOK, "")
	var out, errOut bytes.Buffer
	o := Options{URL: srv.URL, Key: dummyKey, Model: "alias", AgentBin: fakeAgent(t, "exit 0"), DryRun: true,
		Stdout: &out, Stderr: &errOut}
	if code, err := runAgent(context.Background(), agentByName(t, "claude"), o); err != nil || code != 0 {
		t.Fatalf("code %d, %v", code, err)
	}
	d := parseDryRun(t, out.String())
	if d.set["ANTHROPIC_MODEL"] != "alias" || d.set["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] != "40960" {
		t.Errorf("set = %v", d.set)
	}
}

func TestRunRealKeyStaysOutOfArgv(t *testing.T) {
	srv := fakeRunWarden(t, "demo/model", 40960, http.StatusOK, "sk-real-warden-key")
	var out, errOut bytes.Buffer
	o := Options{URL: srv.URL, Key: "sk-real-warden-key", KeyGiven: true, AgentBin: fakeAgent(t, "exit 0"), DryRun: true,
		Stdout: &out, Stderr: &errOut}
	if code, err := runAgent(context.Background(), agentByName(t, "claude"), o); err != nil || code != 0 {
		t.Fatalf("code %d, %v", code, err)
	}
	if strings.Contains(out.String()+errOut.String(), "sk-real-warden-key") {
		t.Errorf("the key is printed:\n%s%s", out.String(), errOut.String())
	}
	d := parseDryRun(t, out.String())
	if d.set["ANTHROPIC_AUTH_TOKEN"] != "<api-key>" || strings.Contains(d.argv[2], "ANTHROPIC_AUTH_TOKEN") {
		t.Errorf("token in env %q, settings %s", d.set["ANTHROPIC_AUTH_TOKEN"], d.argv[2])
	}
}

func TestRunNotReady(t *testing.T) {
	loading := fakeRunWarden(t, "demo/model", 40960, http.StatusServiceUnavailable, "")
	keyed := fakeRunWarden(t, "demo/model", 40960, http.StatusOK, "sk-right")
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cases := []struct {
		name, url string
		wait      time.Duration
		want      []string
	}{
		{"nothing listening", gone.URL, 0, []string{"no warden answers at " + gone.URL, "warden serve", "--serve", "--url (WARDEN_URL)"}},
		{"loading", loading.URL, 0, []string{"the warden at " + loading.URL + " is not ready (starting: engines are loading)", "warden wait --url " + loading.URL}},
		{"loading past --wait", loading.URL, 700 * time.Millisecond, []string{"after waiting 700ms", "is not ready"}},
		{"wrong key", keyed.URL, 0, []string{"401", "--api-key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			o := Options{URL: tc.url, Key: dummyKey, AgentBin: fakeAgent(t, "exit 0"), Wait: tc.wait,
				Stdout: &out, Stderr: &errOut}
			code, err := runAgent(context.Background(), agentByName(t, "claude"), o)
			if code != 1 || err == nil {
				t.Fatalf("code %d, err %v; want 1 and an error", code, err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if out.Len() > 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}

func TestRunMissingBinary(t *testing.T) {
	srv := fakeRunWarden(t, "demo/model", 40960, http.StatusOK, "")
	t.Setenv("PATH", t.TempDir())
	for _, a := range Agents {
		t.Run(a.Name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			o := Options{URL: srv.URL, Key: dummyKey, Stdout: &out, Stderr: &errOut}
			code, err := runAgent(context.Background(), a, o)
			if code != 127 || err == nil {
				t.Fatalf("code %d, err %v; want 127", code, err)
			}
			for _, s := range []string{a.Bin + " (" + a.Title + ") is not on PATH", "npm install -g " + a.Package, "--agent-bin"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
	t.Run("explicit", func(t *testing.T) {
		o := Options{URL: srv.URL, Key: dummyKey, AgentBin: "/nonexistent/claude", Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		code, err := runAgent(context.Background(), agentByName(t, "claude"), o)
		if code != 127 || err == nil || !strings.Contains(err.Error(), "--agent-bin /nonexistent/claude") {
			t.Fatalf("code %d, err %v", code, err)
		}
	})
}

// runMain runs Main for the agent called name as the command does (this
// process's environment and standard input) and returns the status it
// would exit with and its output, the error's message last on stderr.
func runMain(t *testing.T, name string, o Options) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	o.Stdin, o.Stdout, o.Stderr, o.Environ = os.Stdin, &out, &errOut, os.Environ()
	if err := Main(context.Background(), agentByName(t, name), o); err != nil {
		e, ok := exit.As(err)
		if !ok {
			t.Fatalf("run: %v", err)
		}
		code = e.Code
		errOut.WriteString(e.Msg)
	}
	return code, out.String(), errOut.String()
}

// TestRunExitCodePassthrough runs a fake agent that prints its environment
// and arguments and exits 3.
func TestRunExitCodePassthrough(t *testing.T) {
	srv := fakeRunWarden(t, "demo/model", 40960, http.StatusOK, "")
	dir := t.TempDir()
	t.Setenv("FAKE_AGENT_DIR", dir)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-real")
	bin := fakeAgent(t, `env > "$FAKE_AGENT_DIR/env"; for a in "$@"; do echo "$a"; done > "$FAKE_AGENT_DIR/args"; exit 3`)
	code, stdout, stderr := runMain(t, "claude", Options{URL: srv.URL, AgentBin: bin, UserArgs: []string{"-p", "hi there"}})
	if code != 3 {
		t.Fatalf("exit code %d, want the agent's 3\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	envText, _ := os.ReadFile(filepath.Join(dir, "env"))
	env := environMap(strings.Split(strings.TrimSpace(string(envText)), "\n"))
	for k, v := range map[string]string{"ANTHROPIC_BASE_URL": srv.URL, "ANTHROPIC_AUTH_TOKEN": dummyKey,
		"ANTHROPIC_MODEL": "demo/model", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "40960", "FAKE_AGENT_DIR": dir} {
		if env[k] != v {
			t.Errorf("agent's %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["ANTHROPIC_API_KEY"]; ok {
		t.Error("the agent got ANTHROPIC_API_KEY")
	}
	argsText, _ := os.ReadFile(filepath.Join(dir, "args"))
	args := strings.Split(strings.TrimSpace(string(argsText)), "\n")
	if len(args) != 4 || args[0] != "--settings" || args[2] != "-p" || args[3] != "hi there" {
		t.Errorf("agent's args = %q", args)
	}
	if !strings.Contains(stderr, "told Claude Code: context window 40960") {
		t.Errorf("stderr = %q", stderr)
	}

	if code, _, _ := runMain(t, "codex", Options{URL: srv.URL, AgentBin: fakeAgent(t, "exit 0")}); code != 0 {
		t.Errorf("an agent that exits 0: code %d", code)
	}
	if code, _, _ := runMain(t, "opencode", Options{URL: srv.URL, AgentBin: fakeAgent(t, "kill -TERM $$")}); code != 128+int(syscall.SIGTERM) {
		t.Errorf("an agent killed by SIGTERM: code %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	if code, _, stderr := runMain(t, "claude", Options{URL: srv.URL, URLFlag: true, Serve: "--dp 2", AgentBin: bin}); code != 2 ||
		!strings.Contains(stderr, "--serve starts a warden of its own") {
		t.Errorf("--url with --serve: code %d, %q", code, stderr)
	}
	// A URL not given as a flag (WARDEN_URL from the environment:
	// command's TestRunURLFromTheEnvironment) does not conflict with
	// --serve (the missing agent is found before anything starts: 127, not 2).
	if code, _, stderr := runMain(t, "claude", Options{URL: srv.URL, Serve: "--dp 2", AgentBin: "/nonexistent/agent"}); code != 127 {
		t.Errorf("WARDEN_URL with --serve: code %d, %q", code, stderr)
	}
}

// TestRunForwardsSIGTERM: a SIGTERM sent to warden reaches the agent.
func TestRunForwardsSIGTERM(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	bin := fakeAgent(t, `trap 'exit 7' TERM; touch "`+ready+`"; while :; do sleep 0.05; done`)
	res := make(chan int, 1)
	go func() {
		code, _ := execAgent([]string{bin}, os.Environ(), Options{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
		res <- code
	}()
	simproc.Poll(t, "the agent to start", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-res:
		if code != 7 {
			t.Errorf("exit code %d, want 7 (the agent's TERM trap)", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not get the SIGTERM")
	}
}

func TestShellCommandSplitsBack(t *testing.T) {
	p := launchPlan{Unset: []string{"GONE"}, Set: []envSet{{"A", "plain"}, {"B", `it's "quoted" $HOME \ and spaced`}, {"C", ""}}}
	argv := []string{"/bin/agent", "--settings", `{"env":{"X":"y z"}}`, "-p", "don't", "sk-secret"}
	d := parseDryRun(t, shellCommand(p, argv, ""))
	if diff := cmp.Diff(map[string]string{"A": "plain", "B": `it's "quoted" $HOME \ and spaced`, "C": ""}, d.set); diff != "" {
		t.Errorf("set (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(argv, d.argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if !cmp.Equal(d.unset, []string{"GONE"}) {
		t.Errorf("unset %q", d.unset)
	}
	if s := shellCommand(p, argv, "sk-secret"); strings.Contains(s, "sk-secret") || !strings.Contains(s, "<api-key>") {
		t.Errorf("the key is not hidden: %s", s)
	}
}

func TestSplitWords(t *testing.T) {
	for in, want := range map[string][]string{
		`--engine sim --dp 2`:                  {"--engine", "sim", "--dp", "2"},
		`--model "Qwen/Qwen3 4B" -- --x='a b'`: {"--model", "Qwen/Qwen3 4B", "--", "--x=a b"},
		`a\ b "c\"d" 'e\f'`:                    {"a b", `c"d`, `e\f`},
		"  ":                                   nil,
	} {
		got, err := splitWords(in)
		if err != nil || !cmp.Equal(got, want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`"open`, `'open`, `end\`} {
		if _, err := splitWords(bad); err == nil {
			t.Errorf("splitWords(%q): no error", bad)
		}
	}
}

func TestRunServeArgs(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // serveArgs makes the run's log folder there
	args, host, port, logDir, err := serveArgs([]string{"--engine", "sim", "--", "--max-model-len", "4096"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--engine", "sim", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--log-dir", logDir, "--", "--max-model-len", "4096"}
	if diff := cmp.Diff(want, args); diff != "" || host != "127.0.0.1" || port == 0 {
		t.Errorf("args (-want +got):\n%s host %q port %d", diff, host, port)
	}
	if fi, err := os.Stat(logDir); err != nil || !fi.IsDir() {
		t.Errorf("the log folder %s was not made: %v", logDir, err)
	}
	args, host, port, logDir, err = serveArgs([]string{"--port=18655", "-host", "0.0.0.0", "--log-dir", "/tmp/x"})
	if err != nil || port != 18655 || host != "0.0.0.0" || logDir != "/tmp/x" ||
		!cmp.Equal(args, []string{"--port=18655", "-host", "0.0.0.0", "--log-dir", "/tmp/x"}) {
		t.Errorf("given --port/--host/--log-dir: %q %q %d %q %v", args, host, port, logDir, err)
	}
	if _, _, _, _, err := serveArgs([]string{"--port", "x"}); err == nil {
		t.Error("--port x: no error")
	}
}

func TestOutputCap(t *testing.T) {
	for _, c := range []struct{ flag, ctx, want int }{
		{0, 0, 0}, {0, 40960, 10240}, {0, 262144, 32000}, {5000, 40960, 5000}, {90000, 40960, 40960}, {5000, 0, 5000}, {0, 3, 1},
	} {
		if got := outputCap(c.flag, c.ctx); got != c.want {
			t.Errorf("outputCap(%d, %d) = %d, want %d", c.flag, c.ctx, got, c.want)
		}
	}
}
