package command

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/bench"
)

func runBench(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runWarden(t, append([]string{"bench"}, args...)...)
}

func TestCommandRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--url", "localhost:1"},
		{"--url", "http://127.0.0.1:1", "--stages", "4,eight"},
		{"--url", "http://127.0.0.1:1", "--api", "grpc"},
	} {
		_, _, err := runBench(t, args...)
		if err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	t.Setenv("WARDEN_BENCH_TIME_SCALE", "0.1")
	if _, _, err := runBench(t, "--url", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "--time-scale") {
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
	_, stderr, err := runBench(t, "--url", srv.URL, "--ab", "none", "--stages", "1", "--stage", "1s", "--time-scale", "10",
		"--poll", "200ms", "--turns", "1", "--chars-per-token", "4", "--out", dir)
	if err == nil || !strings.Contains(err.Error(), "no turn succeeded") || !strings.Contains(err.Error(), "the engine says no") {
		t.Fatalf("bench against a refusing engine: err %v\n%s", err, stderr)
	}
	if _, statErr := os.Stat(filepath.Join(dir, bench.FileTurns)); statErr != nil {
		t.Errorf("results not written: %v", statErr)
	}
}

// TestBenchLoadFromTheEnvironment: WARDEN_BENCH_LOAD and
// WARDEN_BENCH_TOOL_TIME are --load and --tool-time given, the tool time
// over the preset's (bench's TestLoadFlags has the presets themselves).
func TestBenchLoadFromTheEnvironment(t *testing.T) {
	t.Setenv("WARDEN_BENCH_LOAD", "agent")
	t.Setenv("WARDEN_BENCH_TOOL_TIME", "1s,5s")
	var o bench.Options
	cmd := benchCommand()
	cmd.Action = func(c *cli.Context) error { o = benchOptions(c); return nil }
	app := &cli.App{Name: "warden", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run([]string{"warden", "bench", "--url", "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if o.Load != bench.LoadAgent || o.ToolTime != "1s,5s" || !o.ToolTimeSet || o.SubagentsSet || o.MixSet {
		t.Fatalf("options from the environment: %+v", o)
	}
	cfg, err := o.Config()
	preset := bench.DefaultOptions()
	preset.URL, preset.Load = o.URL, bench.LoadAgent
	want, _ := preset.Config()
	if err != nil || cfg.ToolTime != (bench.ToolTime{Median: time.Second, P90: 5 * time.Second}) || cfg.Subagents != want.Subagents {
		t.Fatalf("from the environment: %+v %+v, %v", cfg.ToolTime, cfg.Subagents, err)
	}
}
