package serve

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/lmwarden/warden/internal/simproc"
)

// unitFile reads scripts/warden.service into its Key=Value lines (the last
// of each key wins, as in systemd; Environment= lines are all kept).
func unitFile(t *testing.T) (map[string]string, []string) {
	t.Helper()
	b, err := os.ReadFile("../scripts/warden.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if k == "Environment" {
			env = append(env, v)
		}
		keys[k] = v
	}
	return keys, env
}

// helpDefault is a flag's default as `warden serve --help` prints it.
func helpDefault(t *testing.T, help, flag string) time.Duration {
	t.Helper()
	// The flag's usage may wrap: its default is on one of the lines up to the next flag.
	m := regexp.MustCompile(`--` + flag + ` value [^\[]*?\(default: ([0-9a-z]+)\)`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("no default for --%s in warden serve --help", flag)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The unit leaves the engines to the warden's own stop, gives that stop its
// whole time (drain, then the engines' grace), restarts the warden only
// when it failed, and sets only variables the warden reads.
func TestServiceUnitLeavesTheStopToTheWarden(t *testing.T) {
	keys, env := unitFile(t)
	want := map[string]string{"KillMode": "mixed", "KillSignal": "SIGTERM", "Restart": "on-failure", "Type": "simple"}
	for k, v := range want {
		if keys[k] != v {
			t.Errorf("%s=%s, want %s", k, keys[k], v)
		}
	}
	help, err := exec.Command(simproc.Binary(t), "serve", "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	drain, grace := helpDefault(t, string(help), "drain-timeout"), helpDefault(t, string(help), "stop-grace")
	stop, err := time.ParseDuration(keys["TimeoutStopSec"] + "s")
	if err != nil {
		t.Fatalf("TimeoutStopSec=%s: %v", keys["TimeoutStopSec"], err)
	}
	if need := drain + grace + 10*time.Second; stop < need {
		t.Errorf("TimeoutStopSec=%v is shorter than --drain-timeout %v + --stop-grace %v + 10s for the final scrape and reaping",
			stop, drain, grace)
	}
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if strings.HasPrefix(name, "WARDEN_") && !strings.Contains(string(help), "$"+name+"]") {
			t.Errorf("the unit sets %s, which no flag of warden serve reads", name)
		}
	}
}

// aliveNow reports whether pid runs (a zombie does not).
func aliveNow(pid int32) bool {
	p, err := process.NewProcess(pid)
	if err != nil {
		return false
	}
	st, err := p.Status()
	return err == nil && !slices.Contains(st, process.Zombie)
}

// A service manager's stop, as scripts/warden.service sets it (KillMode=mixed):
// SIGTERM to the warden alone, then, after TimeoutStopSec, SIGKILL to what
// is left of the unit. The warden drains the stream in flight, refuses new
// connections, stops every engine and exits 0 before the timeout, so the
// SIGKILL finds nothing.
func TestServeSIGTERMDrainsLikeAServiceStop(t *testing.T) {
	keys, _ := unitFile(t)
	timeout, err := time.ParseDuration(keys["TimeoutStopSec"] + "s")
	if err != nil {
		t.Fatal(err)
	}
	w := startServe(t, "--dp", "2", "--", "--sim-fork-child", "--sim-time-scale", "1")
	unit := simproc.Descendants(int32(w.cmd.Process.Pid)) // the rest of the "cgroup": engines and their children
	if len(unit) < 4 {
		t.Fatalf("%d processes below the warden, want 2 engines and their children", len(unit))
	}
	req, _ := http.NewRequest(http.MethodPost, w.url+"/v1/chat/completions", strings.NewReader(
		`{"model":"demo","stream":true,"max_tokens":150,"ignore_eos":true,"messages":[{"role":"user","content":"a story"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first event is out
		t.Fatal(err)
	}
	stopAt := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(w.url, "http://")
	simproc.Poll(t, "new connections refused after SIGTERM", func() bool {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	events, last := 0, ""
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			events++
			last = line
		}
		if err != nil {
			break
		}
	}
	if !strings.Contains(last, "[DONE]") || events < 100 {
		t.Errorf("the stream in flight was not drained: %d events, last %q", events, last)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("warden exited with %v after SIGTERM\n%s", err, w.stderr)
		}
	case <-time.After(timeout):
		t.Fatalf("warden still running after TimeoutStopSec=%v: the service manager would SIGKILL it\n%s", timeout, w.stderr)
	}
	took := time.Since(stopAt)
	var left []int32
	for _, pid := range unit {
		if aliveNow(pid) {
			left = append(left, pid)
		}
	}
	if len(left) > 0 {
		t.Errorf("processes %v outlived the warden: the service manager's SIGKILL would have to end them", left)
	}
	if log := w.stderr.String(); !strings.Contains(log, "shutting down: draining") {
		t.Errorf("no drain line in the log:\n%s", log)
	}
	t.Logf("SIGTERM with a stream in flight: %d events drained to [DONE], warden exited 0 after %v (TimeoutStopSec %v), %d engine processes gone",
		events, took.Round(time.Millisecond), timeout, len(unit))
}

// Under systemd (stderr the journal's stream) every log line carries its
// priority and no time; with a hard limit of 4096 descriptors the warden
// warns that it is low.
func TestServeLogsForTheJournalAndWarnsOfALowFDLimit(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(simproc.FreePort(t))
	cmd := exec.Command("sh", "-c", `ulimit -n 4096 && exec "$0" "$@"`, simproc.Binary(t), "serve", "--model", "demo",
		"--engine", "sim", "--port", port, "--log-dir", filepath.Join(dir, "logs"), "--dp", "1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	out := &simproc.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	simproc.Poll(t, "the ready line", func() bool { return strings.Contains(out.String(), "ready at") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("warden exited with %v", err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	prio := regexp.MustCompile(`^<[3467]>level=(ERROR|WARN|INFO|DEBUG) msg=`)
	lines := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, " msg=") {
			continue
		}
		lines++
		if !prio.MatchString(line) || strings.Contains(line, "time=") {
			t.Errorf("not a journal line: %q", line)
		}
	}
	if !strings.Contains(string(b), `<4>level=WARN msg="file-descriptor limit is low`) || lines < 5 {
		t.Errorf("%d log lines, no warning of the low file-descriptor limit:\n%s", lines, b)
	}
	t.Logf("%d log lines, each with its priority; the limit line: %s", lines,
		regexp.MustCompile(`.*file-descriptor limit.*`).FindString(string(b)))
}

// A service stop while the engines still load: the warden stops them and
// exits 130, which the unit counts as success (SuccessExitStatus=130).
func TestServeSIGTERMWhileLoadingExits130WithNoEngineLeft(t *testing.T) {
	keys, _ := unitFile(t)
	if keys["SuccessExitStatus"] != "130" {
		t.Errorf("SuccessExitStatus=%s, want 130", keys["SuccessExitStatus"])
	}
	port := strconv.Itoa(simproc.FreePort(t))
	cmd := exec.Command(simproc.Binary(t), "serve", "--model", "demo", "--engine", "sim", "--port", port,
		"--log-dir", t.TempDir(), "--dp", "2", "--", "--sim-load-seconds", "60", "--sim-fork-child")
	stderr := &simproc.SyncBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	simproc.Poll(t, "both engines started", func() bool { return strings.Count(stderr.String(), `msg="engine started"`) == 2 })
	unit := simproc.Descendants(int32(cmd.Process.Pid))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("warden exited with %v, want status 130\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "interrupted while engines were starting; all stopped") {
		t.Errorf("no word of the interrupted start:\n%s", stderr)
	}
	for _, pid := range unit {
		if aliveNow(pid) {
			t.Errorf("process %d outlived the warden", pid)
		}
	}
	t.Logf("SIGTERM while loading: exit 130, %d engine processes gone", len(unit))
}

// The unit does not run the warden and its engines as root, names the
// vllm executable (a venv is not on systemd's PATH), and its comment shows
// a drop-in that clears ExecStart= before setting engine arguments
// (issue 45).
func TestServiceUnitNotRootAndSaysWhatToSet(t *testing.T) {
	keys, env := unitFile(t)
	if keys["DynamicUser"] != "yes" && (keys["User"] == "" || keys["User"] == "root") {
		t.Errorf("the unit runs as root: want DynamicUser=yes or a User=")
	}
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "WARDEN_VLLM=/") }) {
		t.Errorf("the unit does not set WARDEN_VLLM to a full path: %v", env)
	}
	b, err := os.ReadFile("../scripts/warden.service")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^#\s+ExecStart=\n#\s+ExecStart=/`).Match(b) {
		t.Error("the unit's comment shows no drop-in that clears ExecStart= before setting it")
	}
	for _, dir := range []string{"WARDEN_LOG_DIR=/var/log/warden", "HF_HOME=/var/cache/warden/"} {
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, dir) }) {
			t.Errorf("the unit does not set %s (a folder systemd makes for the dynamic user)", dir)
		}
	}
	if keys["LogsDirectory"] != "warden" || keys["CacheDirectory"] != "warden" {
		t.Errorf("LogsDirectory=%q CacheDirectory=%q, want warden for both", keys["LogsDirectory"], keys["CacheDirectory"])
	}
}
