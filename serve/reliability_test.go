package serve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	psnet "github.com/shirou/gopsutil/v4/net"
	"github.com/shirou/gopsutil/v4/process"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/schema"
)

// Reliability of a whole `warden serve` on the simulator: an engine
// SIGKILLed mid-stream is restarted and the counters survive; only the
// warden's port faces the network; keys stay out of logs.

// enginePID finds the engine process listening on port among the warden's
// descendants.
func enginePID(t *testing.T, w *wardenProc, port int) int32 {
	t.Helper()
	for _, pid := range simproc.Descendants(int32(w.cmd.Process.Pid)) {
		p, err := process.NewProcess(pid)
		if err != nil {
			continue
		}
		args, _ := p.CmdlineSlice()
		if i := slices.Index(args, "--port"); i >= 0 && i+1 < len(args) && args[i+1] == strconv.Itoa(port) {
			return pid
		}
	}
	t.Fatalf("no engine process with --port %d", port)
	return 0
}

const shortChat = `{"model":"demo","max_tokens":4,"messages":[{"role":"user","content":"hello there"}]}`

func TestServeEngineKilledMidStreamIsRestartedAndCountersSurvive(t *testing.T) {
	w := startServe(t, "--dp", "2", "--", "--sim-time-scale", "1")
	for range 4 {
		if resp, body := post(t, w.url+"/v1/chat/completions", shortChat, map[string]string{"X-Warden-Replica": "0"}); resp.StatusCode != 200 {
			t.Fatalf("warm-up: %s %s", resp.Status, body)
		}
	}
	before := w.status(t).Replicas[0]
	req, _ := http.NewRequest(http.MethodPost, w.url+"/v1/chat/completions", strings.NewReader(
		`{"model":"demo","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"a long story"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Warden-Replica", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first event is out: mid-stream from here
		t.Fatal(err)
	}
	if err := syscall.Kill(int(enginePID(t, w, before.Port)), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tail, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(tail), `"error"`) || !strings.Contains(string(tail), "replica 0") {
		t.Fatalf("the stream did not end with an error event naming replica 0 (%v):\n%s", err, tail)
	}
	for i := range 10 {
		if resp, body := post(t, w.url+"/v1/chat/completions", shortChat, nil); resp.StatusCode != 200 {
			t.Fatalf("request %d after the kill: %s %s", i, resp.Status, body)
		}
	}
	simproc.Poll(t, "replica 0 restarted and back", func() bool {
		r := w.status(t).Replicas[0]
		return r.Up && r.Restarts == 1
	})
	if resp, body := post(t, w.url+"/v1/chat/completions", shortChat, map[string]string{"X-Warden-Replica": "0"}); resp.StatusCode != 200 {
		t.Fatalf("after the restart: %s %s", resp.Status, body)
	}
	after := w.status(t).Replicas[0]
	if after.Requests < before.Requests+2 || after.PromptTokens <= before.PromptTokens || after.Errors == 0 {
		t.Errorf("counters did not survive the restart: before %d requests %d prompt tokens, after %d requests %d prompt tokens, %d errors",
			before.Requests, before.PromptTokens, after.Requests, after.PromptTokens, after.Errors)
	}
	t.Logf("replica 0: %d requests, %d prompt tokens before; %d requests, %d prompt tokens, %d errors, %d restarts after",
		before.Requests, before.PromptTokens, after.Requests, after.PromptTokens, after.Errors, after.Restarts)
}

// nonLoopbackIP is an IPv4 address of this machine that is not loopback,
// or nil.
func nonLoopbackIP() net.IP {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

func TestServeExposesOnlyItsPortAndKeepsKeysOutOfLogs(t *testing.T) {
	const key, admin = "sk-warden-Key-4e1f9", "adm-Token-77c2"
	logDir := t.TempDir()
	w := startServe(t, "--dp", "2", "--host", "0.0.0.0", "--api-key", key, "--admin-token", admin, "--log-dir", logDir)
	st := w.status(t)
	checkEnginesOnLoopback(t, w, st)
	if ip := nonLoopbackIP(); ip == nil {
		t.Log("no non-loopback address: the remote-caller checks are covered by proxy.TestAdminNeedsLoopbackOrTheToken only")
	} else {
		checkFromRemote(t, ip, w.url[strings.LastIndex(w.url, ":")+1:], st, admin)
	}
	if resp, _ := post(t, w.url+"/warden/policy", `{"policy":"sticky"}`, nil); resp.StatusCode != 200 {
		t.Errorf("admin from loopback without a token: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		path string
		hdr  map[string]string
		want int
	}{
		{"/v1/chat/completions", nil, 401},
		{"/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key + "x"}, 401},
		{"/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key}, 200},
		{"/v1/messages", map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}, 200},
	} {
		if resp, body := post(t, w.url+c.path, shortChat, c.hdr); resp.StatusCode != c.want {
			t.Errorf("%s with %v: %d, want %d: %s", c.path, c.hdr, resp.StatusCode, c.want, body)
		}
	}
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		t.Fatal("warden did not exit after SIGINT")
	}
	logs := allLogs(t, w, logDir)
	for _, secret := range []string{key, admin} {
		if strings.Contains(logs, secret) {
			t.Errorf("a key appears in the logs: %q", secret)
		}
	}
}

// checkEnginesOnLoopback asserts that every engine's listening sockets are
// bound to 127.0.0.1 and that the proxy reaches it there.
func checkEnginesOnLoopback(t *testing.T, w *wardenProc, st schema.Status) {
	t.Helper()
	for _, r := range st.Replicas {
		conns, err := psnet.ConnectionsPid("tcp", enginePID(t, w, r.Port))
		if err != nil {
			t.Fatal(err)
		}
		listening := 0
		for _, c := range conns {
			if c.Status == "LISTEN" {
				listening++
				if c.Laddr.IP != "127.0.0.1" {
					t.Errorf("engine %d listens on %s:%d", r.Rank, c.Laddr.IP, c.Laddr.Port)
				}
			}
		}
		if listening == 0 || !strings.HasPrefix(r.URL, "http://127.0.0.1:") {
			t.Errorf("engine %d: %d listening sockets, URL %s", r.Rank, listening, r.URL)
		}
	}
}

// checkFromRemote calls from ip (a non-loopback address of this machine):
// the engines' ports refuse it, and the admin endpoint wants the token.
func checkFromRemote(t *testing.T, ip net.IP, port string, st schema.Status, admin string) {
	t.Helper()
	for _, r := range st.Replicas {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(r.Port)), 2*time.Second); err == nil {
			c.Close()
			t.Errorf("engine %d answers on %s", r.Rank, ip)
		}
	}
	t.Logf("engines refuse %s; admin checked from %s", ip, ip)
	remote := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}).DialContext}}
	defer remote.CloseIdleConnections()
	url := "http://" + net.JoinHostPort(ip.String(), port)
	for _, c := range []struct {
		auth string
		want int
	}{{"", 403}, {"Bearer nope", 403}, {"Bearer " + admin, 200}} {
		req, _ := http.NewRequest(http.MethodPost, url+"/warden/policy", strings.NewReader(`{"policy":"sticky"}`))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := remote.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("admin from %s with %q: %d, want %d", ip, c.auth, resp.StatusCode, c.want)
		}
	}
}

// allLogs is the warden's stderr and every engine log file.
func allLogs(t *testing.T, w *wardenProc, logDir string) string {
	t.Helper()
	logs := w.stderr.String()
	files, _ := filepath.Glob(filepath.Join(logDir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		logs += string(b)
	}
	if len(files) == 0 || !strings.Contains(logs, "warden summary") {
		t.Fatalf("no logs captured (%d files)", len(files))
	}
	return logs
}

func TestServeKilledMidStreamLeavesNoEngine(t *testing.T) {
	w := startServe(t, "--dp", "2", "--", "--sim-fork-child", "--sim-time-scale", "1")
	engines := simproc.Descendants(int32(w.cmd.Process.Pid))
	if len(engines) < 4 {
		t.Fatalf("want 2 engines each with a forked child, found %v", engines)
	}
	req, _ := http.NewRequest(http.MethodPost, w.url+"/v1/chat/completions", strings.NewReader(
		`{"model":"demo","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"a long story"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil { // the warden dies with a stream in flight
		t.Fatal(err)
	}
	<-w.done
	simproc.WaitGone(t, engines)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the client's stream ended cleanly although the warden was killed")
	}
}
