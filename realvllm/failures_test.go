package realvllm_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

// TestFailedStart makes real vLLM fail to start in the ways users meet,
// each under its own `warden serve --device cpu --dp 1` (in parallel: most
// of each is vLLM's imports), and checks that the warden exits 1 with an
// error whose first lines quote vLLM's cause, not the tracebacks and
// warnings printed after it, and name the fix (docs/operations.md, "Why a
// rank did not start").
func TestFailedStart(t *testing.T) {
	needEngine(t)
	engine := func(maxLen int, extra ...string) []string {
		return append([]string{"--", "--dtype", "float32", "--enforce-eager", "--block-size", "32",
			"--max-model-len", strconv.Itoa(maxLen)}, extra...)
	}
	tests := []struct {
		name  string
		args  []string // after --device cpu --dp 1 --vllm V
		kill  bool     // SIGKILL the engine's process tree once its EngineCore runs
		cause []string // in the "cause:" line; nil: no such line
		hint  []string // in the "hint:" line
	}{
		{name: "a context beyond the KV cache",
			args:  append([]string{"--model", install.model, "--cpu-kv-cache", "8MiB"}, engine(16384)...),
			cause: []string{"ValueError: To serve at least one request with the model's max seq len (16384)"},
			hint:  []string{"--max-model-len "}}, // and the log's estimate: checked below
		{name: "an engine killed while loading",
			args: append([]string{"--model", install.model}, engine(4096)...), kill: true,
			hint: []string{"killed by SIGKILL", "OOM killer"}},
		{name: "a model path that does not exist",
			args:  append([]string{"--model", "/nonexistent/warden-test-model"}, engine(4096)...),
			cause: []string{"HFValidationError", "'/nonexistent/warden-test-model'"},
			hint:  []string{"neither a local folder nor a Hugging Face model name", "check the path"}},
		{name: "a flag vLLM rejects",
			args:  append([]string{"--model", install.model}, engine(4096, "--no-such-flag")...),
			cause: []string{"vllm: error: unrecognized arguments: --no-such-flag"},
			hint:  []string{"check the extra arguments after --"}},
		{name: "an unknown tool-call parser",
			args:  append([]string{"--model", install.model, "--tools", "nope"}, engine(4096)...),
			cause: []string{"KeyError: 'invalid tool call parser: nope (chose from {"},
			hint:  []string{`no tool-call parser "nope"`, "--tools", "hermes", "qwen3_xml"}},
		{name: "auto tool choice without a parser",
			args:  append([]string{"--model", install.model}, engine(4096, "--enable-auto-tool-choice")...),
			cause: []string{"TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"},
			hint:  []string{"--enable-auto-tool-choice needs a --tool-call-parser", "--tools"}},
	}
	// As many at once as -parallel allows (GOMAXPROCS): each is mostly
	// vLLM's Python imports, and on two cores more at once only take longer.
	// The longest two come first.
	start := time.Now()
	t.Cleanup(func() { t.Logf("all %d failures in %s", len(tests), time.Since(start).Round(time.Second)) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := startFailing(t, tt.kill, tt.args...).wait(t)
			head := f.lines[:min(len(f.lines), 3)]
			first := f.lines[0]
			if !strings.Contains(first, "engine rank 0 (port ") || !strings.Contains(first, "failed to start: ") {
				t.Fatalf("the error does not start with the rank and its exit:\n%s", f.msg)
			}
			cause, hint := lineWith(head, "cause: "), lineWith(head, "hint: ")
			for _, w := range tt.cause {
				if !strings.Contains(cause, w) {
					t.Errorf("the cause line lacks %q:\n%s", w, f.msg)
				}
			}
			for _, w := range tt.hint {
				if !strings.Contains(hint, w) {
					t.Errorf("the hint line lacks %q:\n%s", w, f.msg)
				}
			}
			for _, l := range head {
				if strings.Contains(l, "Engine core initialization failed") || strings.Contains(l, "WARNING") ||
					strings.Contains(l, "Warning:") || strings.Contains(l, "resource_tracker") {
					t.Errorf("the first lines quote a pointer or a warning as the cause (%q):\n%s", l, f.msg)
				}
			}
			if tt.kill {
				if !strings.HasSuffix(first, "failed to start: killed by signal killed") || cause != "" {
					t.Errorf("want the kill as the cause, and no line of the log quoted as one:\n%s", f.msg)
				}
			}
			if tt.cause != nil {
				f.checkCauseLine(t)
			}
			if tt.name == "a context beyond the KV cache" {
				est := regexp.MustCompile(`estimated maximum model length is (\d+)`).FindStringSubmatch(f.log)
				if est == nil {
					t.Fatalf("the rank's log has no estimate:\n%s", tail(f.log, 3000))
				}
				if want := "`warden serve ... -- --max-model-len " + est[1] + "`"; !strings.Contains(hint, want) {
					t.Errorf("the hint lacks %s, the log's estimate:\n%s", want, f.msg)
				}
			}
		})
	}
}

// failure is a warden serve that exited because its engine did not start.
type failure struct {
	msg     string   // the error, from "engine rank" on
	lines   []string // msg's lines
	log     string   // the rank's log file
	logPath string
}

// failRun is a warden serve started by startFailing.
type failRun struct {
	cmd     *exec.Cmd
	stderr  *simproc.SyncBuffer
	logPath string
	began   time.Time
	done    chan failEnd
}

// failEnd is how a failRun ended: the warden's Wait, every process seen
// below it, what the watch did, or why it gave up.
type failEnd struct {
	err   error
	procs []proc
	notes []string
	fatal string
}

// startFailing starts warden serve with args and watches it: when kill is
// set it SIGKILLs the engine's process tree once the EngineCore runs.
func startFailing(t *testing.T, kill bool, args ...string) *failRun {
	t.Helper()
	logDir := t.TempDir()
	args = append([]string{"serve", "--device", "cpu", "--dp", "1", "--vllm", install.vllm,
		"--port", strconv.Itoa(simproc.FreePort(t)), "--log-dir", logDir, "--served-model-name", served,
		"--startup-timeout", "5m", "--stop-grace", "5s"}, args...)
	r := &failRun{cmd: exec.Command(simproc.Binary(t), args...), stderr: &simproc.SyncBuffer{},
		logPath: filepath.Join(logDir, "rank-0.log"), done: make(chan failEnd, 1)}
	r.cmd.Stderr = r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.began = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // a warden that outlived its test
	})
	go r.watch(kill, exited)
	return r
}

func (r *failRun) watch(kill bool, exited <-chan error) {
	var end failEnd
	seen := map[int32]proc{}
	killed := !kill
	deadline := time.After(5 * time.Minute)
	for waiting := true; waiting; {
		select {
		case end.err = <-exited:
			waiting = false
		case <-deadline:
			end.fatal = "warden still running after 5 minutes"
			r.done <- end
			return
		case <-time.After(200 * time.Millisecond):
			ps := tree(int32(r.cmd.Process.Pid))
			for _, p := range ps {
				seen[p.pid] = p
			}
			if killed {
				continue
			}
			for _, p := range ps {
				if strings.HasPrefix(p.name, "VLLM::EngineCor") { // the kernel keeps 15 characters
					for _, q := range ps {
						_ = syscall.Kill(int(q.pid), syscall.SIGKILL)
					}
					end.notes = append(end.notes, fmt.Sprintf("SIGKILLed the engine's %d processes %s in",
						len(ps), time.Since(r.began).Round(time.Second)))
					killed = true
					break
				}
			}
		}
	}
	if !killed {
		end.fatal = "the engine failed before its EngineCore ran: nothing was killed"
	}
	for _, p := range seen {
		end.procs = append(end.procs, p)
	}
	end.notes = append(end.notes, "warden exited in "+time.Since(r.began).Round(time.Second).String())
	r.done <- end
}

// wait returns the error of the warden, which must exit 1 within 5
// minutes of its start and leave no process behind.
func (r *failRun) wait(t *testing.T) *failure {
	t.Helper()
	end := <-r.done
	for _, n := range end.notes {
		t.Log(n)
	}
	out := r.stderr.String()
	if end.fatal != "" {
		t.Fatalf("%s\n%s", end.fatal, out)
	}
	var exit *exec.ExitError
	if !errors.As(end.err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("warden serve exited with %v, want status 1\n%s", end.err, out)
	}
	waitGone(t, 30*time.Second, end.procs)
	i := strings.Index(out, "engine rank 0 (port ")
	if i < 0 {
		t.Fatalf("no startup error in the warden's output:\n%s", out)
	}
	msg := strings.TrimSpace(out[i:])
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the error:\n%s", msg)
	return &failure{msg: msg, lines: strings.Split(msg, "\n"), log: string(b), logPath: r.logPath}
}

// checkCauseLine checks that the error points to the line of the rank's
// log that holds the cause, and quotes it (and the lines before it) there.
func (f *failure) checkCauseLine(t *testing.T) {
	t.Helper()
	m := regexp.MustCompile(`last lines of (\S+) up to the cause, line (\d+):`).FindStringSubmatch(f.msg)
	if m == nil || m[1] != f.logPath {
		t.Fatalf("the error names no line of %s:\n%s", f.logPath, f.msg)
	}
	n, _ := strconv.Atoi(m[2])
	logLines := strings.Split(f.log, "\n")
	cause := strings.TrimPrefix(lineWith(f.lines, "cause: "), "cause: ")
	if n < 1 || n > len(logLines) {
		t.Fatalf("line %d is not in the log", n)
	}
	at := strings.TrimSuffix(logLines[n-1], "\r") // vLLM ends some lines with CRLF
	if !strings.HasSuffix(at, cause) {
		t.Errorf("line %d of the log is not the cause %q", n, cause)
	}
	if !strings.Contains(f.msg, "\n  | "+at+"\nfull log: "+f.logPath) {
		t.Errorf("the quoted lines do not end with the cause's line %d:\n%s", n, f.msg)
	}
}

// lineWith is the first of lines that starts with prefix, "" when none.
func lineWith(lines []string, prefix string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
