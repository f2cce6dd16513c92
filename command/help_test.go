package command

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

// eachCommand calls f with every command of the tree and its path
// ("serve", "run claude"), the root first with path "".
func eachCommand(f func(path string, c *cli.Command)) {
	var walk func(prefix string, cs []*cli.Command)
	walk = func(prefix string, cs []*cli.Command) {
		for _, c := range cs {
			if c.Hidden {
				continue
			}
			p := strings.TrimSpace(prefix + " " + c.Name)
			f(p, c)
			walk(p, c.Subcommands)
		}
	}
	f("", &cli.Command{Flags: App("test").Flags})
	walk("", App("test").Commands)
}

// checkText fails the test for every line of text wider than helpWidth.
func checkText(t *testing.T, what, text string) {
	t.Helper()
	for i, line := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(line); n > helpWidth {
			t.Errorf("%s, line %d is %d columns (at most %d):\n%s", what, i+1, n, helpWidth, line)
		}
	}
}

// TestEveryHelpFits runs every command's --help and checks it: no line over
// 100 columns, and every flag with usage text and a WARDEN_* variable that
// the help names.
func TestEveryHelpFits(t *testing.T) {
	n := 0
	eachCommand(func(path string, c *cli.Command) {
		args := append(strings.Fields(path), "--help")
		out, _, err := runWarden(t, args...)
		if err != nil {
			t.Errorf("warden %s: %v", strings.Join(args, " "), err)
			return
		}
		n++
		checkText(t, "warden "+strings.Join(args, " "), out)
		if c.Name == "serve" && strings.Contains(out, ", ...") {
			t.Errorf("warden serve --help leaves a list open (\", ...\")")
		}
		for _, f := range c.Flags {
			df, ok := f.(cli.DocGenerationFlag)
			if !ok || f == cli.HelpFlag || f == cli.VersionFlag {
				continue
			}
			name := "warden " + path + " --" + f.Names()[0]
			if strings.TrimSpace(df.GetUsage()) == "" {
				t.Errorf("%s has no usage text", name)
			}
			env := df.GetEnvVars()
			if len(env) == 0 || !strings.HasPrefix(env[0], "WARDEN_") {
				t.Errorf("%s has no WARDEN_* variable (%v)", name, env)
			} else if !strings.Contains(out, "$"+env[0]) {
				t.Errorf("%s: its --help does not name %s", name, env[0])
			}
		}
	})
	if n < 15 {
		t.Errorf("checked the help of %d commands; the tree has more", n)
	}
}

// TestServeHelpGroupsTheFlags: serve's flags come in named groups, the
// policy flag lists every policy.
func TestServeHelpGroupsTheFlags(t *testing.T) {
	out, _, err := runWarden(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{catEngines + ":", catDevices + ":", catAccess + ":", catPlacement + ":", catRun + ":",
		"adaptive, hash, least-inflight, off, off-v2, sticky"} {
		if !strings.Contains(out, want) {
			t.Errorf("warden serve --help has no %q", want)
		}
	}
}

// TestUsageErrors runs the warden binary with the mistakes a newcomer makes
// and checks each answer: exit status 2, a line or two (never the whole
// help), the name meant when it was a near miss, the names known, and a
// pointer to --help.
func TestUsageErrors(t *testing.T) {
	bin := simproc.Binary(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"sevre"}, []string{`no command "sevre"; did you mean serve?`, "Run 'warden --help'"}},
		{[]string{"xyzzy"}, []string{`no command "xyzzy"`, "warden has these commands: serve, route,"}},
		{[]string{"serve", "--modle", "X"}, []string{"unknown flag --modle; did you mean --model?", "Run 'warden serve --help'"}},
		{[]string{"serve"}, []string{"warden serve: --model is required (or WARDEN_MODEL)", "Run 'warden serve --help'"}},
		{[]string{"serve", "--model", "m", "--dp", "two"}, []string{`invalid value "two" for flag --dp`}},
		{[]string{"bench"}, []string{"--url is required (or WARDEN_BENCH_URL)"}},
		{[]string{"run", "aider"}, []string{`no agent "aider"`, "warden run has these agents: claude, codex, opencode.", "Run 'warden run --help'"}},
		{[]string{"run", "claud"}, []string{`did you mean claude?`}},
		{[]string{"status", "--jsno"}, []string{"did you mean --json?"}},
		// names from vLLM and other routers, and engine flags before -- (issue 45)
		{[]string{"serve", "--model", "m", "--replicas", "2"}, []string{"unknown flag --replicas; did you mean --dp?"}},
		{[]string{"route", "--replicas", "http://x"}, []string{"unknown flag --replicas; did you mean --replica?"}},
		{[]string{"serve", "--model", "m", "--data-parallel-size", "2"}, []string{"unknown flag --data-parallel-size; did you mean --dp?", "with --vllm-dp: vLLM's own data parallelism"}},
		{[]string{"serve", "--tensor-parallel-size", "2"}, []string{"did you mean --tp?"}},
		{[]string{"serve", "--engine", "sim", "--sim-time-scale", "10"}, []string{"unknown flag --sim-time-scale; it is the simulator's: engine flags go after --", "warden serve ... -- --sim-time-scale VALUE"}},
		{[]string{"serve", "--max-model-len", "4096"}, []string{"--max-model-len; it is vLLM's: engine flags go after --"}},
		{[]string{"serve", "--model", "m", "--", "--data-parallel-size", "2"}, []string{"--data-parallel-size is set by the warden: use the warden's --dp", "or --dp with --vllm-dp"}},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("warden %s: %v, want exit status 2\n%s", strings.Join(tc.args, " "), err, out.String())
			continue
		}
		text := strings.TrimRight(out.String(), "\n")
		checkText(t, "warden "+strings.Join(tc.args, " "), text)
		if lines := strings.Count(text, "\n") + 1; lines > 3 || strings.Contains(text, "OPTIONS:") {
			t.Errorf("warden %s printed %d lines, want the error alone:\n%s", strings.Join(tc.args, " "), lines, text)
		}
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("warden %s: no %q in\n%s", strings.Join(tc.args, " "), w, text)
			}
		}
	}
}

// TestEveryFlagIsInFlagsMd: every flag of every command appears in
// docs/flags.md, in a section whose heading names the command.
func TestEveryFlagIsInFlagsMd(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(string(doc), "\n## ")
	eachCommand(func(path string, c *cli.Command) {
		if path == "" {
			return
		}
		cmd := "`warden " + strings.Fields(path)[0] // `warden run <agent>` names all three
		var text string
		for _, s := range sections {
			if heading, _, _ := strings.Cut(s, "\n"); strings.Contains(heading, cmd) {
				text += s
			}
		}
		for _, f := range c.Flags {
			if f == cli.HelpFlag {
				continue
			}
			if name := "`--" + f.Names()[0] + "`"; !strings.Contains(text, name) {
				t.Errorf("docs/flags.md has no %s in a section headed %s`", name, cmd)
			}
		}
	})
}

// TestUnsupportedOSSaysWhereAndWhatWorks: the refusal of serve outside Unix
// (a Windows build) names the OS, where it runs, and what works there.
func TestUnsupportedOSSaysWhereAndWhatWorks(t *testing.T) {
	err := unsupported("warden serve", "windows")
	if exitCode(cliExit(err)) != 2 {
		t.Errorf("exit status of %v, want 2", err)
	}
	for _, want := range []string{"warden serve: not supported on windows", "WSL2", "warden route, status, bench"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if processGroups("warden serve") != nil {
		t.Errorf("processGroups refuses on a Unix build")
	}
}
