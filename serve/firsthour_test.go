package serve

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

// getStatus is the status code of GET url with the bearer key (none: "").
func getStatus(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeClientKeyVariableRequiresNoKey: a shell set up for a client
// (WARDEN_API_KEY exported, as the Codex setup does) starts a warden that
// requires no key, and says so; the server's key has a variable of its own,
// and the warden says at start that clients must send it and where it came
// from.
func TestServeClientKeyVariableRequiresNoKey(t *testing.T) {
	t.Setenv("WARDEN_API_KEY", "sk-local")
	t.Setenv("WARDEN_SERVER_API_KEY", "")
	os.Unsetenv("WARDEN_SERVER_API_KEY")
	w := startServe(t)
	if got := getStatus(t, w.url+"/v1/models", ""); got != http.StatusOK {
		t.Errorf("WARDEN_API_KEY exported: GET /v1/models without a key got %d, want 200", got)
	}
	if !strings.Contains(w.stderr.String(), "WARDEN_API_KEY is set in this shell") {
		t.Errorf("no word at start that WARDEN_API_KEY is the clients' key:\n%s", w.stderr)
	}
	w.stop(t)

	t.Setenv("WARDEN_SERVER_API_KEY", "sk-server")
	w = startServe(t)
	if got := getStatus(t, w.url+"/v1/models", ""); got != http.StatusUnauthorized {
		t.Errorf("WARDEN_SERVER_API_KEY set: GET /v1/models without a key got %d, want 401", got)
	}
	if got := getStatus(t, w.url+"/v1/models", "sk-server"); got != http.StatusOK {
		t.Errorf("WARDEN_SERVER_API_KEY set: GET /v1/models with it got %d, want 200", got)
	}
	if !strings.Contains(w.stderr.String(), "clients must send the API key set by WARDEN_SERVER_API_KEY") {
		t.Errorf("no word at start that clients must send the key from WARDEN_SERVER_API_KEY:\n%s", w.stderr)
	}
	w.stop(t)

	w = startServe(t, "--api-key", "sk-flag")
	if !strings.Contains(w.stderr.String(), "clients must send the API key set by --api-key") {
		t.Errorf("no word at start that clients must send the key from --api-key:\n%s", w.stderr)
	}
	w.stop(t)
}

// TestServeCtrlCSaysWhatDrainsAndASecondOneStops: Ctrl-C with a stream in
// flight says how many requests drain, for how long, and that a second
// Ctrl-C stops now; the second one closes the stream and the warden exits
// with its summary, long before its 10-minute drain timeout.
func TestServeCtrlCSaysWhatDrainsAndASecondOneStops(t *testing.T) {
	w := startServe(t, "--drain-timeout", "10m")
	body := `{"model":"demo","stream":true,"max_tokens":4000,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, w.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatalf("no first line of the stream: %v", sc.Err())
	}
	streamEnded := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(streamEnded)
	}()

	if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	simproc.Poll(t, "the drain's first line", func() bool {
		return strings.Contains(w.stderr.String(), "draining 1 request, up to 10m0s; press Ctrl-C again to stop now")
	})
	select {
	case err := <-w.done:
		t.Fatalf("the warden exited during the drain with the stream in flight: %v\n%s", err, w.stderr)
	default:
	}
	if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("exit after the second Ctrl-C: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the warden did not stop after a second Ctrl-C\n%s", w.stderr)
	}
	<-streamEnded
	out := w.stderr.String()
	for _, want := range []string{"second interrupt: closing 1 request now", "warden summary"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the warden's output:\n%s", want, out)
		}
	}
}

// TestServeSimSaysWhatItAnswers: a warden on the simulator says, where
// `warden run` and the status page read it, that the answers are filler
// text and how to make them short.
func TestServeSimSaysWhatItAnswers(t *testing.T) {
	w := startServe(t)
	st := w.status(t)
	if st.Engines == nil {
		t.Fatal("no engines in the status")
	}
	if note := strings.Join(st.Engines.Simulator, " "); !strings.Contains(note, "filler text") ||
		!strings.Contains(note, "--sim-output-tokens 20") {
		t.Errorf("status engines.simulator = %+v, want the simulator's first-contact note", st.Engines)
	}
	w.stop(t)
}

// TestRunAgainstTheSimulatorSaysWhatItAnswers: `warden run` against a
// warden on the simulator tells the user, before the agent starts, that the
// answers will be filler text.
func TestRunAgainstTheSimulatorSaysWhatItAnswers(t *testing.T) {
	w := startServe(t, "--tools", "hermes", "--", "--sim-output-tokens", "8")
	cmd := exec.Command(simproc.Binary(t), "run", "claude", "--url", w.url+"/v1", "--agent-bin", "true", "--", "-p", "hi")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("warden run claude --agent-bin true: %v\n%s", err, out)
	}
	for _, want := range []string{"warden run: the engines are the built-in simulator: its answers are filler text",
		"warden run: each answer is 8 tokens long"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	w.stop(t)
}
