// Package simproc is a test helper that builds the warden binary once per
// test process and runs `warden sim serve` as a real subprocess (its own
// process group, real HTTP) for other packages' tests. It owns nothing at run
// time; only tests import it.
package simproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/promtext"
	"github.com/lmwarden/warden/internal/wardenproc"
)

var (
	buildOnce sync.Once
	buildPath string
	buildDir  string
	buildErr  error
)

// Binary returns the path of a warden binary for tests. If WARDEN_TEST_BIN is
// set, that path is returned as is. Otherwise the binary is built once per
// test process with the `go` in PATH into a fresh directory under
// os.TempDir; Cleanup removes that directory.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("WARDEN_TEST_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "warden-simproc-")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "warden")
		cmd := exec.Command("go", "build", "-o", buildPath, "github.com/lmwarden/warden")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("simproc: %v", buildErr)
	}
	return buildPath
}

// Cleanup removes the binary that Binary built, if any. Call it from TestMain
// after m.Run; it is safe to call when nothing was built.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// Main is a test package's TestMain: it runs the tests, removes the binary
// Binary built and exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Poll calls cond every 10 ms until it holds, and fails the test when it has
// not held within a minute; what names the condition in that failure.
func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := ports.Loopback()
	if err != nil {
		t.Fatalf("simproc: free port: %v", err)
	}
	return p
}

// Proc is one running `warden sim serve` process.
type Proc struct {
	URL  string // http://127.0.0.1:PORT, no trailing slash
	Port int
	Cmd  *exec.Cmd

	out    *SyncBuffer
	exited chan struct{}
	once   sync.Once
}

// Start runs `<bin> sim serve test-model --port P --host 127.0.0.1 args...`
// in its own process group (with Pdeathsig SIGKILL) and waits until GET
// /health answers 200 (deadline 30 s; fails fast if the process exits). A
// t.Cleanup SIGKILLs the whole group and reaps it; on test failure the
// process output is logged.
func Start(t testing.TB, args ...string) *Proc {
	t.Helper()
	p := StartNoWait(t, args...)
	if err := p.WaitHealthy(30 * time.Second); err != nil {
		t.Fatalf("simproc: %v\noutput:\n%s", err, p.Output())
	}
	return p
}

// StartNoWait is Start without the health wait, for tests of loading and
// start-up failures.
func StartNoWait(t testing.TB, args ...string) *Proc {
	t.Helper()
	bin := Binary(t)
	port := FreePort(t)
	argv := append([]string{"sim", "serve", "test-model", "--port", strconv.Itoa(port), "--host", "127.0.0.1"}, args...)
	cmd := exec.Command(bin, argv...)
	buf := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("simproc: start %s: %v", bin, err)
	}
	p := &Proc{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Port: port, Cmd: cmd, out: buf, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("sim output (%s):\n%s", p.URL, p.Output())
		}
	})
	return p
}

// WaitHealthy polls GET /health until it answers 200, the process exits, or
// the timeout passes.
func (p *Proc) WaitHealthy(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := wardenproc.Poll(ctx, &http.Client{Timeout: 2 * time.Second}, p.URL, 20*time.Millisecond, p.exited)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wardenproc.ErrExited):
		return fmt.Errorf("sim exited before healthy: %v", p.Cmd.ProcessState)
	case ctx.Err() != nil:
		return fmt.Errorf("sim not healthy after %v", timeout)
	}
	return err
}

// Exited is closed once the process has been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Output returns everything the process wrote to stdout and stderr so far.
func (p *Proc) Output() string { return p.out.String() }

// Kill SIGKILLs the whole process group and waits until the leader is
// reaped. Idempotent.
func (p *Proc) Kill() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
}

// Signal sends sig to the process (the leader only, not the group).
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Metrics scrapes GET /metrics and returns each sample's value summed over
// its labels, keyed by metric name. Histograms appear as NAME_sum and
// NAME_count; counters keep the exported name (with _total).
func (p *Proc) Metrics(t testing.TB) map[string]float64 {
	t.Helper()
	m, err := ScrapeMetrics(p.URL + "/metrics")
	if err != nil {
		t.Fatalf("simproc: %v", err)
	}
	return m
}

// ScrapeMetrics fetches url and sums each Prometheus metric over its labels
// (see Proc.Metrics).
func ScrapeMetrics(url string) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	families, err := promtext.Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	out := map[string]float64{}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				out[name+"_sum"] += h.GetSampleSum()
				out[name+"_count"] += float64(h.GetSampleCount())
				continue
			}
			out[name] += promtext.Value(m)
		}
	}
	return out, nil
}

// SyncBuffer is a bytes.Buffer that a test can read while a subprocess or
// another goroutine writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// KVCapacity reads an engine's KV capacity from its GET /metrics as the
// proxy must (num_gpu_blocks x block_size of vllm:cache_config_info, read
// here by hand so that a test does not check the parser with itself), and
// returns the block size too.
func KVCapacity(url string) (tokens, blockSize int, err error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "vllm:cache_config_info{") {
			blocks, size := labelInt(line, "num_gpu_blocks"), labelInt(line, "block_size")
			return blocks * size, size, nil
		}
	}
	return 0, 0, fmt.Errorf("%s/metrics has no vllm:cache_config_info", url)
}

func labelInt(line, name string) int {
	_, rest, ok := strings.Cut(line, `,`+name+`="`)
	if !ok {
		if _, rest, ok = strings.Cut(line, `{`+name+`="`); !ok {
			return 0
		}
	}
	v, _, _ := strings.Cut(rest, `"`)
	n, _ := strconv.Atoi(v)
	return n
}

// LastEvent returns the data of the last SSE event in s ("" if none).
func LastEvent(s string) string {
	var last string
	for _, l := range strings.Split(s, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			last = d
		}
	}
	return last
}

// HeapAfterGC is the live heap after two collections, for memory tests.
func HeapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Descendants lists every process below pid (children, their children, ...).
func Descendants(pid int32) []int32 {
	p, err := process.NewProcess(pid)
	if err != nil {
		return nil
	}
	kids, err := p.Children()
	if err != nil {
		return nil
	}
	var out []int32
	for _, k := range kids {
		out = append(out, k.Pid)
		out = append(out, Descendants(k.Pid)...)
	}
	return out
}

// WaitGone fails the test unless every pid has exited within 30 seconds
// (zombies count as gone).
func WaitGone(t testing.TB, pids []int32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive after the warden stopped", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func alive(pid int32) bool {
	p, err := process.NewProcess(pid)
	if err != nil {
		return false
	}
	st, err := p.Status()
	if err != nil {
		return false
	}
	return len(st) == 0 || st[0] != process.Zombie
}
