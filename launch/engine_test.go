package launch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStartupErrorMessage(t *testing.T) {
	e := &StartupError{Rank: 2, Port: 8102, Where: "GPU GPU-x", Cause: "exited with status 1",
		LastLines: []string{"a", "b"}, Hint: "do this", LogPath: "/run/rank-2.log"}
	want := "engine rank 2 (port 8102, GPU GPU-x) failed to start: exited with status 1\n" +
		"last lines of /run/rank-2.log:\n  | a\n  | b\nhint: do this\nfull log: /run/rank-2.log"
	if diff := cmp.Diff(want, e.Error()); diff != "" {
		t.Errorf("Error() (-want +got):\n%s", diff)
	}
}

func TestStateString(t *testing.T) {
	got := []string{Starting.String(), Loading.String(), Ready.String(), Down.String(), Stopped.String(), State(9).String()}
	if diff := cmp.Diff([]string{"starting", "loading", "healthy", "down", "stopped", "unknown"}, got); diff != "" {
		t.Error(diff)
	}
}

func TestPortInUseAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	exe, _ := os.Executable()
	specs := []Spec{{Rank: 0, Port: port, Argv: []string{exe}, LogPath: filepath.Join(t.TempDir(), "r.log")}}
	_, err = Start(context.Background(), specs, Options{})
	var se *StartupError
	if !errors.As(err, &se) || !strings.Contains(se.Hint, "already in use") {
		t.Fatalf("Start on a busy port: %v", err)
	}
}
