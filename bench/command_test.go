package bench

import (
	"bytes"
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
