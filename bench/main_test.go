package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runMain runs Main with the flags' defaults changed by edit.
func runMain(t *testing.T, edit func(*Options)) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	edit(&o)
	err := Main(context.Background(), o, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestMainWritesResultsAndPrintsTable(t *testing.T) {
	_, srv := newFake(t, true)
	dir := filepath.Join(t.TempDir(), "res")
	out, stderr, err := runMain(t, func(o *Options) {
		o.URL, o.Stages, o.Stage, o.TimeScale, o.Poll, o.Turns = srv.URL, "1", 2*time.Second, 10, 200*time.Millisecond, 1
		o.SystemTokens, o.FirstTokens, o.TurnTokens, o.MaxTokens, o.Out = 50, 100, 20, 8, dir
	})
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	// The table's three lines, then perhaps a note on the bench's own lag
	// (a fake server answers within it).
	table, _, _ := strings.Cut(out, "\n\n> ")
	if !strings.HasPrefix(out, "| sessions | sessions/h off→sticky |") || strings.Count(strings.TrimSuffix(table, "\n"), "\n") != 2 {
		t.Errorf("stdout is not the A/B table:\n%s", out)
	}
	for _, f := range []string{FileTable, FileSummary, FileJSON, FileTurns, FileChart} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if !strings.Contains(stderr, " 1 session [sticky]") {
		t.Errorf("no progress bar for the sticky stage on stderr:\n%s", stderr)
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
