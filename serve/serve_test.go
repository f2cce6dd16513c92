package serve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

// wardenProc is a `warden serve` started by a test.
type wardenProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *simproc.SyncBuffer
	done   chan error
}

// startServe runs `warden serve --engine sim` with args and waits for its
// "ready at" line.
func startServe(t *testing.T, args ...string) *wardenProc {
	t.Helper()
	port := simproc.FreePort(t)
	argv := append([]string{"serve", "--model", "demo", "--engine", "sim", "--port", strconv.Itoa(port),
		"--log-dir", t.TempDir(), "--stop-grace", "5s"}, args...)
	return startWarden(t, "http://127.0.0.1:"+strconv.Itoa(port), argv...)
}

func post(t *testing.T, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp, string(b)
}

func TestServeSimEndToEnd(t *testing.T) {
	w := startServe(t, "--dp", "4", "--", "--sim-fork-child")
	engines := simproc.Descendants(int32(w.cmd.Process.Pid))
	if len(engines) < 8 {
		t.Fatalf("want 4 engines each with a forked child (8 processes), found %d: %v", len(engines), engines)
	}

	resp, body := post(t, w.url+"/v1/chat/completions",
		`{"model":"demo","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hello warden"}]}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "data: [DONE]") || strings.Count(body, "data: ") < 3 {
		t.Fatalf("streaming chat: %s\n%s", resp.Status, body)
	}
	if strings.Contains(body, `"usage"`) {
		t.Errorf("client did not ask for usage but got a usage chunk:\n%s", body)
	}
	if rank := resp.Header.Get("X-Warden-Replica"); rank == "" {
		t.Errorf("no X-Warden-Replica header")
	}

	resp, body = post(t, w.url+"/v1/messages?beta=true",
		`{"model":"demo","max_tokens":8,"stream":true,"system":[{"type":"text","text":"You are terse."}],`+
			`"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"X-Claude-Code-Session-Id": "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c", "anthropic-version": "2023-06-01"})
	if resp.StatusCode != 200 || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("anthropic messages: %s\n%s", resp.Status, body)
	}

	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("warden exited with %v after SIGINT\n%s", err, w.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("warden did not exit after SIGINT\n%s", w.stderr)
	}
	simproc.WaitGone(t, engines)
	if !strings.Contains(w.stderr.String(), "warden summary") {
		t.Errorf("no exit summary on stderr:\n%s", w.stderr)
	}
}

func TestServeKilledWardenLeavesNoEngine(t *testing.T) {
	w := startServe(t, "--dp", "2", "--", "--sim-fork-child")
	engines := simproc.Descendants(int32(w.cmd.Process.Pid))
	if len(engines) < 4 {
		t.Fatalf("want 2 engines each with a forked child, found %v", engines)
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.done
	simproc.WaitGone(t, engines)
}

func TestServeWithoutGPUsNamesSimEngine(t *testing.T) {
	cmd := exec.Command(simproc.Binary(t), "serve", "--model", "demo", "--vllm", "/nonexistent/vllm",
		"--port", strconv.Itoa(simproc.FreePort(t)))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve without vLLM should fail, got %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--engine sim") {
		t.Fatalf("error does not point to --engine sim:\n%s", out)
	}
}

func TestServeStartupFailureNamesTheRankAndTheFix(t *testing.T) {
	cmd := exec.Command(simproc.Binary(t), "serve", "--model", "demo", "--engine", "sim", "--dp", "2",
		"--port", strconv.Itoa(simproc.FreePort(t)), "--log-dir", t.TempDir(), "--", "--max-model-len", "262144")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve with a context that cannot fit should fail, got %v\n%s", err, out)
	}
	for _, want := range []string{"failed to start", "last lines of", "max seq len (262144)", "-- --max-model-len 45872"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestServeTheMissionLine: `warden serve --model Qwen/Qwen3-4B-Instruct-2507
// --dp 4` on the simulator of the reference rig's four 16 GB cards, whose
// engines (as vLLM's) take the model's real 262,144-token default and
// refuse it when the KV cache cannot hold one such sequence. The warden
// passes --max-model-len auto: every rank starts, at the longest context
// its KV cache holds, and /v1/models and the status say which.
func TestServeTheMissionLine(t *testing.T) {
	port := simproc.FreePort(t)
	w := startWarden(t, "http://127.0.0.1:"+strconv.Itoa(port), "serve", "--model", "Qwen/Qwen3-4B-Instruct-2507", "--dp", "4",
		"--engine", "sim", "--port", strconv.Itoa(port), "--log-dir", t.TempDir(), "--stop-grace", "5s")
	resp, err := http.Get(w.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := gjson.GetBytes(b, "data.0.max_model_len").Int()
	if got <= 0 || got >= 262144 {
		t.Fatalf("/v1/models max_model_len %d, want the KV cache's fit below 262,144: %s", got, b)
	}
	st, _ := http.Get(w.url + "/warden/status")
	sb, _ := io.ReadAll(st.Body)
	st.Body.Close()
	if n := gjson.GetBytes(sb, "max_model_len").Int(); n != got || gjson.GetBytes(sb, "replicas.#").Int() != 4 {
		t.Errorf("status max_model_len %d (want %d) over %d replicas", n, got, gjson.GetBytes(sb, "replicas.#").Int())
	}
	if !strings.Contains(w.stderr.String(), "--max-model-len auto") {
		t.Errorf("the start log does not say which context:\n%s", w.stderr)
	}
}
