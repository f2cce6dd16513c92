package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/lmwarden/warden/enginelog/enginelogtest"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/simproc"
)

// fakeSpecs builds n fake-engine specs in dir; env(i) adds FAKE_* settings.
func fakeSpecs(t *testing.T, dir string, n int, env func(i int) []string) []Spec {
	t.Helper()
	free, err := ports.Free(n, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	specs := make([]Spec, n)
	for i := range n {
		specs[i] = Spec{
			Rank: i, Port: free[i], LogPath: filepath.Join(dir, "logs", fmt.Sprintf("rank-%d.log", i)),
			Argv: []string{exe, "serve", "fake-model", "--port", strconv.Itoa(free[i])},
			Env:  append([]string{roleEnv + "=engine", "FAKE_DIR=" + dir, "FAKE_RANK=" + strconv.Itoa(i)}, env(i)...),
			GPUs: []string{strconv.Itoa(i)},
		}
	}
	return specs
}

func testOptions() Options {
	return Options{PollInterval: 20 * time.Millisecond, StopGrace: 10 * time.Second, RestartMin: 10 * time.Millisecond}
}

// assertGone waits (generously) until no pid is a live, non-zombie process.
func assertGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		simproc.Poll(t, fmt.Sprintf("%s: process %d to exit", what, pid), func() bool {
			p, err := process.NewProcess(int32(pid))
			return err != nil || !live(context.Background(), p)
		})
	}
}

func assertAlive(t *testing.T, what string, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("%s: process %d is not running: %v", what, pid, err)
	}
}

func TestStartIsParallelAndStopKillsEveryDescendant(t *testing.T) {
	dir := t.TempDir()
	forks := []string{"group", "setsid", ""}
	// Each engine waits for all three to exist before it turns healthy: a
	// one-by-one start would never finish.
	specs := fakeSpecs(t, dir, 3, func(i int) []string {
		return []string{"FAKE_BARRIER=3", "FAKE_FORK=" + forks[i]}
	})
	var prog simproc.SyncBuffer
	var mu sync.Mutex
	var events []string
	opts := testOptions()
	opts.Progress = &prog
	opts.OnState = func(rank int, s State, reason string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf("%d:%s", rank, s))
	}
	g, err := Start(context.Background(), specs, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var pids []int
	for i := range 3 {
		if s := g.State(i); s != Ready {
			t.Errorf("rank %d state %s, want healthy", i, s)
		}
		pid := g.PID(i)
		if want := readPid(t, dir, "engine-"+strconv.Itoa(i)); pid != want {
			t.Errorf("rank %d PID() = %d, the engine says %d", i, pid, want)
		}
		pids = append(pids, pid)
	}
	inGroup, leftGroup := readPid(t, dir, "grandchild-0"), readPid(t, dir, "grandchild-1")
	assertAlive(t, "grandchild in group", inGroup)
	assertAlive(t, "grandchild that left the group", leftGroup)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertGone(t, "after Stop", append(pids, inGroup, leftGroup)...)
	if err := g.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	select {
	case <-g.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	mu.Lock()
	for i := range 3 {
		for _, s := range []State{Starting, Ready, Stopped} {
			if !slices.Contains(events, fmt.Sprintf("%d:%s", i, s)) {
				t.Errorf("OnState never reported rank %d %s; got %v", i, s, events)
			}
		}
	}
	mu.Unlock()
	for i := range 3 {
		if !strings.Contains(prog.String(), fmt.Sprintf("rank %-2d GPU %-14d", i, i)) {
			t.Errorf("progress lacks rank %d:\n%s", i, prog.String())
		}
	}
	if !strings.Contains(prog.String(), "healthy") {
		t.Errorf("progress never said healthy:\n%s", prog.String())
	}
	log, _ := os.ReadFile(specs[0].LogPath)
	for _, want := range []string{"=== warden: start rank 0", "CUDA_VISIBLE_DEVICES=0", "fake engine: serving on port"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("rank 0 log lacks %q:\n%s", want, log)
		}
	}
}

// maxLenLog is vLLM's refusal of a context beyond the KV cache.
const maxLenLog = enginelogtest.MaxLenLine

func TestStartupFailureStopsTheOthers(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 3, func(i int) []string {
		if i == 1 { // fails once the others have forked their grandchildren
			return []string{"FAKE_FAIL=" + maxLenLog, "FAKE_FAIL_AFTER=2"}
		}
		return []string{"FAKE_NEVER=1", "FAKE_FORK=group"}
	})
	g, err := Start(context.Background(), specs, testOptions())
	if g != nil {
		t.Fatal("Start returned a group despite a failing rank")
	}
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	if se.Rank != 1 || se.Cause != "exited with status 1" {
		t.Errorf("rank %d cause %q, want rank 1, exited with status 1", se.Rank, se.Cause)
	}
	if !slices.Contains(se.LastLines, maxLenLog) || !slices.Contains(se.LastLines, "INFO fake engine: loading weights") {
		t.Errorf("LastLines = %q", se.LastLines)
	}
	if !strings.Contains(se.Hint, "--max-model-len 38528") || !strings.Contains(se.Hint, "262144 tokens") {
		t.Errorf("Hint = %q", se.Hint)
	}
	msg := err.Error()
	for _, want := range []string{"engine rank 1 (port ", "GPU 1", specs[1].LogPath, "| " + maxLenLog, "hint: "} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	for _, i := range []string{"0", "2"} {
		assertGone(t, "rank "+i+" after a failed start", readPid(t, dir, "engine-"+i), readPid(t, dir, "grandchild-"+i))
	}
}

func TestStartupTimeout(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 2, func(i int) []string {
		if i == 0 {
			return []string{"FAKE_NEVER=1"}
		}
		return nil
	})
	opts := testOptions()
	opts.StartupTimeout = 300 * time.Millisecond
	_, err := Start(context.Background(), specs, opts)
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	if se.Rank != 0 || se.Cause != "not healthy after 300ms" || !strings.Contains(se.Hint, "--startup-timeout") {
		t.Errorf("got rank %d cause %q hint %q", se.Rank, se.Cause, se.Hint)
	}
	assertGone(t, "after timeout", readPid(t, dir, "engine-0"), readPid(t, dir, "engine-1"))
}

func TestStartCanceled(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_NEVER=1"} })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		readPid(t, dir, "engine-0")
		cancel()
	}()
	_, err := Start(ctx, specs, testOptions())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start error = %v, want context.Canceled", err)
	}
	assertGone(t, "after cancel", readPid(t, dir, "engine-0"))
}

func TestCrashIsReportedDownAndRestarted(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_FORK=group"} })
	type event struct {
		s      State
		reason string
	}
	events := make(chan event, 16)
	opts := testOptions()
	opts.OnState = func(_ int, s State, reason string) { events <- event{s, reason} }
	g, err := Start(context.Background(), specs, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer g.Stop(context.Background())
	for e := <-events; e.s != Ready; e = <-events {
	}
	first, child := g.PID(0), readPid(t, dir, "grandchild-0")
	os.Remove(filepath.Join(dir, "grandchild-0.pid"))
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/crash", specs[0].Port)); err == nil {
		resp.Body.Close()
	}
	down := <-events
	if down.s != Down || !strings.Contains(down.reason, "exited with status 3: RuntimeError: fake engine crashing") {
		t.Fatalf("after the crash got %s %q, want down with the exit and last line", down.s, down.reason)
	}
	assertGone(t, "crashed engine's orphaned child", first, child)
	for e := <-events; e.s != Ready; e = <-events {
		if e.s == Down || e.s == Stopped {
			t.Fatalf("restart failed: %s %q", e.s, e.reason)
		}
	}
	if n := g.Restarts(0); n != 1 {
		t.Errorf("Restarts(0) = %d, want 1", n)
	}
	if g.PID(0) == first || g.PID(0) == 0 {
		t.Errorf("PID after restart = %d (first was %d)", g.PID(0), first)
	}
	log, _ := os.ReadFile(specs[0].LogPath)
	if !strings.Contains(string(log), "=== warden: restart 1 of rank 0") || !strings.Contains(string(log), "exited with status 3") {
		t.Errorf("log does not say why it restarted:\n%s", log)
	}
	second := readPid(t, dir, "grandchild-0")
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertGone(t, "restarted engine after Stop", g.PID(0), second)
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 2, func(int) []string { return []string{"FAKE_IGNORE_TERM=1", "FAKE_FORK=group"} })
	opts := testOptions()
	opts.StopGrace = 200 * time.Millisecond
	g, err := Start(context.Background(), specs, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pids := []int{g.PID(0), g.PID(1), readPid(t, dir, "grandchild-0"), readPid(t, dir, "grandchild-1")}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertGone(t, "engines ignoring SIGTERM", pids...)
}

func TestStopContextCutsTheGraceShort(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_IGNORE_TERM=1", "FAKE_FORK=group"} })
	opts := testOptions()
	opts.StopGrace = time.Hour
	g, err := Start(context.Background(), specs, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pids := []int{g.PID(0), readPid(t, dir, "grandchild-0")}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := g.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop error = %v, want DeadlineExceeded", err)
	}
	assertGone(t, "after a forced Stop", pids...)
}

// TestKilledWardenLeavesNoEngine SIGKILLs a process that started engines
// with Start: Pdeathsig must take the engines and their forked children.
func TestKilledWardenLeavesNoEngine(t *testing.T) {
	dir := t.TempDir()
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "FAKE_N=2", "FAKE_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line := readLine(t, bufio.NewReader(out)); line != "READY" {
		t.Fatalf("supervisor said %q", line)
	}
	pids := []int{readPid(t, dir, "engine-0"), readPid(t, dir, "engine-1"),
		readPid(t, dir, "grandchild-0"), readPid(t, dir, "grandchild-1")}
	for _, pid := range pids {
		assertAlive(t, "before the kill", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	assertGone(t, "after the warden was SIGKILLed", pids...)
	// The engine writes its log file directly, so its shutdown is on record.
	simproc.Poll(t, "the engine's shutdown line in rank 0's log", func() bool {
		log, _ := os.ReadFile(filepath.Join(dir, "rank-0.log"))
		return strings.Contains(string(log), "fake engine: shut down")
	})
}

func TestStartRejectsBadSpecs(t *testing.T) {
	good := Spec{Rank: 0, Argv: []string{"x"}, Port: 1000, LogPath: "/tmp/x.log"}
	dup := good
	dup.Rank = 1
	noArgv, noPort := good, good
	noArgv.Argv = nil
	noPort.Port = 0
	for name, specs := range map[string][]Spec{
		"none": nil, "shared port": {good, dup}, "no argv": {noArgv}, "no port": {noPort},
	} {
		if _, err := Start(context.Background(), specs, Options{}); err == nil {
			t.Errorf("%s: Start accepted it", name)
		}
	}
}

func TestMissingExecutableIsAStartupError(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return nil })
	specs[0].Argv = []string{filepath.Join(dir, "no-such-vllm"), "serve"}
	_, err := Start(context.Background(), specs, testOptions())
	var se *StartupError
	if !errors.As(err, &se) || !strings.Contains(se.Cause, "cannot start") {
		t.Fatalf("Start error = %v", err)
	}
}

// BenchmarkStartStop measures warden's own overhead for a 4-rank group of
// fake engines that are healthy at once: fork/exec, health polling, group
// stop with SIGTERM and the descendant sweep.
func BenchmarkStartStop(b *testing.B) {
	exe, _ := os.Executable()
	for b.Loop() {
		dir := b.TempDir()
		free, err := ports.Free(4, "127.0.0.1")
		if err != nil {
			b.Fatal(err)
		}
		var specs []Spec
		for i, p := range free {
			specs = append(specs, Spec{Rank: i, Port: p, LogPath: filepath.Join(dir, strconv.Itoa(i)+".log"),
				Argv: []string{exe, "serve", "m", "--port", strconv.Itoa(p)},
				Env:  []string{roleEnv + "=engine", "FAKE_FORK=group"}})
		}
		g, err := Start(context.Background(), specs, Options{PollInterval: 5 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
