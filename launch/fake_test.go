package launch

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/simproc"
	"go.uber.org/goleak"
)

// The test binary doubles as a fake vLLM ("engine"), as the engine's forked
// child ("grandchild", like vLLM's EngineCore) and as a mini warden
// ("supervisor") that the tests SIGKILL. roleEnv selects the role.
const roleEnv = "WARDEN_LAUNCH_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "engine":
		fakeEngine()
	case "grandchild":
		fakeGrandchild()
	case "supervisor":
		fakeSupervisor()
	default:
		goleak.VerifyTestMain(m)
	}
}

// fakeEngine behaves like `vllm serve ... --port P`, configured by FAKE_*:
//
//	FAKE_DIR, FAKE_RANK  write DIR/engine-RANK.pid (and grandchild-RANK.pid)
//	FAKE_FORK            "group": fork a grandchild in the engine's group;
//	                     "setsid": one that leaves the group
//	FAKE_BARRIER=N       become healthy only once N engine pid files exist
//	FAKE_FAIL=msg        print msg to stderr and exit 1 instead of serving
//	FAKE_FAIL_AFTER=N    ... once N grandchild pid files exist (the others forked)
//	FAKE_NEVER=1         load forever (port never bound)
//	FAKE_IGNORE_TERM=1   ignore SIGTERM (the grandchild too)
//
// On SIGTERM it sends SIGTERM to its own process group and exits, as vLLM's
// API server shuts down its EngineCore. GET /crash makes it exit 3.
func fakeEngine() {
	port := argAfter("--port")
	dir, rank := os.Getenv("FAKE_DIR"), os.Getenv("FAKE_RANK")
	writePid(dir, "engine-"+rank, os.Getpid())
	if os.Getenv("FAKE_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			// Kill the group first: after a SIGKILLed warden, stdout is a
			// broken pipe and printing would end this process (SIGPIPE).
			signal.Ignore(syscall.SIGTERM)
			syscall.Kill(-syscall.Getpgrp(), syscall.SIGTERM)
			fmt.Println("INFO fake engine: shut down")
			os.Exit(0)
		}()
	}
	if mode := os.Getenv("FAKE_FORK"); mode != "" {
		forkGrandchild(mode, dir, rank)
	}
	fmt.Println("INFO fake engine: loading weights")
	if msg := os.Getenv("FAKE_FAIL"); msg != "" {
		waitPidFiles(dir, "grandchild-*.pid", os.Getenv("FAKE_FAIL_AFTER"))
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
	if os.Getenv("FAKE_NEVER") == "1" {
		time.Sleep(time.Hour)
	}
	if n, _ := strconv.Atoi(os.Getenv("FAKE_BARRIER")); n > 0 {
		for {
			m, _ := filepath.Glob(filepath.Join(dir, "engine-*.pid"))
			if len(m) >= n {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	serveFake(port)
}

// waitPidFiles blocks until n (a number; "" means 0) files match pattern in
// dir, for at most 20 s.
func waitPidFiles(dir, pattern, n string) {
	want, _ := strconv.Atoi(n)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if m, _ := filepath.Glob(filepath.Join(dir, pattern)); len(m) >= want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func serveFake(port string) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "OSError: [Errno 98] Address already in use:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/crash", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(os.Stderr, "RuntimeError: fake engine crashing on request")
		os.Exit(3)
	})
	fmt.Println("INFO fake engine: serving on port " + port)
	http.Serve(ln, mux)
}

func forkGrandchild(mode, dir, rank string) {
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"=grandchild")
	if mode == "setsid" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fork:", err)
		os.Exit(2)
	}
	writePid(dir, "grandchild-"+rank, cmd.Process.Pid)
	go cmd.Wait()
}

func fakeGrandchild() {
	if os.Getenv("FAKE_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	time.Sleep(time.Hour)
	os.Exit(0)
}

// fakeSupervisor starts FAKE_N fake engines (forking grandchildren) with
// Start, prints "READY" and waits to be killed.
func fakeSupervisor() {
	n, _ := strconv.Atoi(os.Getenv("FAKE_N"))
	dir := os.Getenv("FAKE_DIR")
	free, err := ports.Free(n, "127.0.0.1")
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	exe, _ := os.Executable()
	var specs []Spec
	for i := range n {
		specs = append(specs, Spec{
			Rank: i, Port: free[i], LogPath: filepath.Join(dir, fmt.Sprintf("rank-%d.log", i)),
			Argv: []string{exe, "serve", "fake", "--port", strconv.Itoa(free[i])},
			Env:  []string{roleEnv + "=engine", "FAKE_DIR=" + dir, "FAKE_RANK=" + strconv.Itoa(i), "FAKE_FORK=group"},
		})
	}
	if _, err := Start(context.Background(), specs, Options{PollInterval: 20 * time.Millisecond}); err != nil {
		fmt.Println("ERROR", strings.ReplaceAll(err.Error(), "\n", " / "))
		os.Exit(1)
	}
	fmt.Println("READY")
	time.Sleep(time.Hour)
}

func argAfter(flag string) string {
	for i, a := range os.Args {
		if a == flag && i+1 < len(os.Args) {
			return os.Args[i+1]
		}
	}
	return ""
}

func writePid(dir, name string, pid int) {
	if dir == "" {
		return
	}
	tmp := filepath.Join(dir, name+".tmp")
	os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o644)
	os.Rename(tmp, filepath.Join(dir, name+".pid"))
}

// readPid waits (generously) for a pid file a fake wrote.
func readPid(t *testing.T, dir, name string) int {
	t.Helper()
	var b []byte
	simproc.Poll(t, fmt.Sprintf("pid file %s in %s", name, dir), func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(dir, name+".pid"))
		return err == nil
	})
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("pid file %s: %v", name, err)
	}
	return pid
}

// readLine reads one line from a supervisor's stdout.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("supervisor output: %v (%q)", err, line)
	}
	return strings.TrimSpace(line)
}
