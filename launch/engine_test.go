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

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/gpu"
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

func TestSpecs(t *testing.T) {
	groups := [][]gpu.Device{{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}, {{Index: 2, UUID: "GPU-c"}, {Index: 3}}}
	e := engineplan.Engine{Kind: "vllm", Model: "m", TP: 2}
	got := Specs(e.Argv, []int{8100, 8101}, groups, "/run/w", "HF_HUB_OFFLINE=1")
	want := []Spec{
		{Rank: 0, Port: 8100, Argv: e.Argv(8100), Env: []string{"HF_HUB_OFFLINE=1"}, LogPath: "/run/w/rank-0.log", GPUs: []string{"GPU-a", "GPU-b"}},
		{Rank: 1, Port: 8101, Argv: e.Argv(8101), Env: []string{"HF_HUB_OFFLINE=1"}, LogPath: "/run/w/rank-1.log", GPUs: []string{"GPU-c", "3"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Specs() (-want +got):\n%s", diff)
	}
	if sim := Specs(engineplan.Engine{Kind: "sim", Model: "m"}.Argv, []int{1}, nil, "/l"); sim[0].GPUs != nil {
		t.Errorf("simulator spec has GPUs %v", sim[0].GPUs)
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
