package wardenproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A child that fails: its reason is the last failure line it wrote, with
// the engine line serve quoted after it; its output is in the log.
func TestStartReasonAndTail(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "serve.log")
	script := `echo starting; echo 'level=ERROR msg="rank 0 failed"'; echo '  | ValueError: too long'; echo 'warden serve: rank 1 failed to start'; echo '  | CUDA out of memory'; exit 3`
	p, err := Start("/bin/sh", []string{"-c", script}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the child did not exit")
	}
	if !p.Exited() || p.Err() == nil || p.Log() != logPath {
		t.Errorf("exited %v err %v log %s", p.Exited(), p.Err(), p.Log())
	}
	if got, want := p.Reason(), "warden serve: rank 1 failed to start (CUDA out of memory)"; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
	if got := p.Tail(2); got != "warden serve: rank 1 failed to start\n  | CUDA out of memory" {
		t.Errorf("Tail(2) = %q", got)
	}
	p.Stop(time.Second) // an exited child is left as it is
}

func TestReasonWithoutAFailureLine(t *testing.T) {
	p, err := Start("/bin/sh", []string{"-c", "echo fine; exit 4"}, filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if got := p.Reason(); got != "serve exited: exit status 4" {
		t.Errorf("Reason = %q", got)
	}
}

// Stop: SIGINT first; a child that ignores it is killed, its group with
// it, after the grace.
func TestStopInterruptsThenKills(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p, err := Start("/bin/sh", []string{"-c", `trap 'echo got INT' INT; touch ` + ready + `; while :; do sleep 0.05; done`},
		filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not start")
		}
	}
	start := time.Now()
	p.Stop(300 * time.Millisecond)
	if !p.Exited() || time.Since(start) < 300*time.Millisecond {
		t.Errorf("Stop returned after %v, exited %v", time.Since(start), p.Exited())
	}
	if b, _ := os.ReadFile(p.Log()); !strings.Contains(string(b), "got INT") {
		t.Errorf("the child did not get SIGINT first: %q", b)
	}
}
