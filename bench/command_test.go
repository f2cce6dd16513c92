package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.App{Name: "warden", Commands: []*cli.Command{Command()}, Writer: &out, ErrWriter: &errOut,
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"warden", "bench"}, args...))
	return out.String(), errOut.String(), err
}

func TestCommandWritesResultsAndPrintsTable(t *testing.T) {
	_, srv := newFake(t, true)
	dir := filepath.Join(t.TempDir(), "res")
	out, stderr, err := runCLI(t, "--url", srv.URL, "--stages", "1", "--stage", "2s", "--time-scale", "10",
		"--poll", "200ms", "--turns", "1", "--system-tokens", "50", "--first-tokens", "100", "--turn-tokens", "20",
		"--max-tokens", "8", "--out", dir)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	if !strings.HasPrefix(out, "| sessions | sessions/h off→sticky |") || strings.Count(out, "\n") != 3 {
		t.Errorf("stdout is not the A/B table:\n%s", out)
	}
	for _, f := range []string{FileTable, FileSummary, FileJSON, FileTurns, FileChart} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if !strings.Contains(stderr, "1 sessions [sticky]") {
		t.Errorf("no progress bar for the sticky stage on stderr:\n%s", stderr)
	}
}

func TestCommandRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--url", "localhost:1"},
		{"--url", "http://127.0.0.1:1", "--stages", "4,eight"},
		{"--url", "http://127.0.0.1:1", "--api", "grpc"},
	} {
		_, _, err := runCLI(t, args...)
		if err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	t.Setenv("WARDEN_BENCH_TIME_SCALE", "0.1")
	if _, _, err := runCLI(t, "--url", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "--time-scale") {
		t.Errorf("WARDEN_BENCH_TIME_SCALE=0.1: err %v", err)
	}
}

// An engine that refuses every turn makes the bench exit non-zero with the
// engine's message, results still written.
func TestCommandFailsWhenNoTurnSucceeds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		case "/metrics":
			io.WriteString(w, "vllm:num_requests_running 0\n")
		case "/warden/status":
			http.NotFound(w, r) // an engine, not a warden
		default:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"type":"error","error":{"type":"BadRequestError","message":"the engine says no"}}`)
		}
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "res")
	_, stderr, err := runCLI(t, "--url", srv.URL, "--ab", "none", "--stages", "1", "--stage", "1s", "--time-scale", "10",
		"--poll", "200ms", "--turns", "1", "--chars-per-token", "4", "--out", dir)
	if err == nil || !strings.Contains(err.Error(), "no turn succeeded") || !strings.Contains(err.Error(), "the engine says no") {
		t.Fatalf("bench against a refusing engine: err %v\n%s", err, stderr)
	}
	if _, statErr := os.Stat(filepath.Join(dir, FileTurns)); statErr != nil {
		t.Errorf("results not written: %v", statErr)
	}
}

func TestFailedNamesTheStageOverTheBound(t *testing.T) {
	res := &Results{
		Stages: []StageSummary{{Sessions: 4, Turns: 95, Errors: 5}, {Variant: "off", Sessions: 8, Turns: 80, Errors: 20}},
		Turns:  []TurnRecord{{Sessions: 4}, {Sessions: 8, Variant: "off", Error: "HTTP 502: replica 1 down"}},
	}
	if err := res.Failed(0.1); err == nil || !strings.Contains(err.Error(), "stage 8 sessions [off]: 20 of 100 turns failed") ||
		!strings.Contains(err.Error(), "replica 1 down") {
		t.Errorf("Failed(0.1) = %v", err)
	}
	if err := res.Failed(0.25); err != nil {
		t.Errorf("within the bound: %v", err)
	}
}
