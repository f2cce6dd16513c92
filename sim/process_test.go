package sim_test

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

func waitExit(t *testing.T, p *simproc.Proc) int {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("sim did not exit")
	}
	return p.Cmd.ProcessState.ExitCode()
}

func TestPortRefusesWhileLoading(t *testing.T) {
	p := simproc.StartNoWait(t, "--sim-load-seconds", "1.5")
	simproc.Poll(t, "the loading log line", func() bool { return strings.Contains(p.Output(), "Loading weights...") })
	_, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p.Port), time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial during loading: %v, want connection refused", err)
	}
	if err := p.WaitHealthy(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	out := p.Output()
	progress := strings.Index(out, "Loading safetensors checkpoint shards: 100% Completed")
	ready := strings.Index(out, "Application startup complete.")
	if progress < 0 || ready < progress || !strings.Contains(out, "GPU KV cache size: 45,872 tokens") {
		t.Errorf("start-up log lacks progress, KV size or ready line in order:\n%s", out)
	}
	resp, err := http.Get(p.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != 0 {
		t.Errorf("/health body length %d, want empty", resp.ContentLength)
	}
}

func TestMaxModelLenBeyondKVFailsLikeVLLM(t *testing.T) {
	p := simproc.StartNoWait(t, "--max-model-len", "262144")
	if code := waitExit(t, p); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := "To serve at least one request with the model's max seq len (262144), (36.00 GiB KV cache is needed, " +
		"which is larger than the available KV cache memory (6.30 GiB). Based on the available memory, the estimated maximum model length is 45872."
	if !strings.Contains(p.Output(), want) {
		t.Errorf("output lacks vLLM's wording %q:\n%s", want, p.Output())
	}
}

func TestSIGTERMExitsZero(t *testing.T) {
	p := simproc.Start(t)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, p); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

func TestFaultDieAfterMidStream(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", "1", "--sim-die-after", "2")
	body := chatBody([]map[string]any{msg("user", "hi")}, 3)
	if code, r := post(t, p.URL+"/v1/chat/completions", body); code != 200 {
		t.Fatalf("request 1: %d %s", code, r.Raw)
	}
	body["max_tokens"] = 1000
	body["stream"] = true
	resp := postRaw(t, p.URL+"/v1/chat/completions", body)
	evs := readAllEvents(t, resp) // ends when the process dies
	if len(evs) == 0 || evs[len(evs)-1].raw == "[DONE]" {
		t.Errorf("stream of %d events ended cleanly; want it cut mid-stream", len(evs))
	}
	if code := waitExit(t, p); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
}

func TestFaultHTTPError(t *testing.T) {
	p := simproc.Start(t, "--sim-http-error", "500")
	code, r := post(t, p.URL+"/v1/chat/completions", chatBody([]map[string]any{msg("user", "hi")}, 3))
	if code != 500 || r.Get("error.message").String() == "" {
		t.Errorf("got %d %s, want 500 with an error body", code, r.Raw)
	}
}

func TestFaultHangAfter(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "--sim-hang-after", "1")
	body := chatBody([]map[string]any{msg("user", "hi")}, 3)
	if code, _ := post(t, p.URL+"/v1/chat/completions", body); code != 200 {
		t.Fatalf("request 1: status %d", code)
	}
	short := &http.Client{Timeout: 300 * time.Millisecond}
	if _, err := short.Post(p.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`)); err == nil {
		t.Error("request 2 was answered; want a hang")
	}
	if _, err := short.Get(p.URL + "/health"); err == nil {
		t.Error("/health answered after the hang began")
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil && !isZombie(pid) }

func TestForkChildDiesOnlyWithGroup(t *testing.T) {
	p := simproc.Start(t, "--sim-fork-child")
	_, v := get(t, p.URL+"/version")
	child := int(v.Get("child_pid").Int())
	if child == 0 || !alive(child) {
		t.Fatalf("child_pid %d not running (/version %s)", child, v.Raw)
	}
	if err := p.Cmd.Process.Kill(); err != nil { // the leader only
		t.Fatal(err)
	}
	waitExit(t, p)
	if !alive(child) {
		t.Fatal("child died with the leader; it should need a group kill")
	}
	p.Kill() // SIGKILL to the group
	simproc.Poll(t, "the child to die with its group", func() bool { return !alive(child) })
}
