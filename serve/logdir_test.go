package serve

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// Two wardens started in the same second each get their own engine log
// folder (issue 45: a shared runs/<time>/ made one rank's restart line quote
// another run's engine).
func TestServeSameSecondOwnLogFolders(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	var ws []*wardenProc
	for range 2 {
		port := strconv.Itoa(simproc.FreePort(t))
		ws = append(ws, startWarden(t, "http://127.0.0.1:"+port,
			"serve", "--model", "demo", "--engine", "sim", "--dp", "1", "--port", port, "--stop-grace", "5s"))
	}
	runs, err := os.ReadDir(filepath.Join(state, "warden", "runs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("two wardens made %d run folders, want 2: %v", len(runs), runs)
	}
	for _, r := range runs {
		if _, err := os.Stat(filepath.Join(state, "warden", "runs", r.Name(), "rank-0.log")); err != nil {
			t.Errorf("run folder %s: %v", r.Name(), err)
		}
	}
	for _, w := range ws {
		w.stop(t)
	}
}
