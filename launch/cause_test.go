package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/enginelog/enginelogtest"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/simproc"
)

// TestStartupErrorLeadsWithTheCause starts a fake engine that prints each
// failure (after lines a previous run left in the log) and checks the
// message: the rank and exit, vLLM's cause, the hint, the lines up to the
// cause with its line in the log file, the log's path.
func TestStartupErrorLeadsWithTheCause(t *testing.T) {
	for _, tt := range enginelogtest.Cases {
		if tt.Reason == "" {
			continue
		}
		t.Run(tt.Log, func(t *testing.T) {
			dir := t.TempDir()
			specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_FAIL=" + enginelogtest.Fixture(t, tt.Log)} })
			os.MkdirAll(filepath.Dir(specs[0].LogPath), 0o755)
			os.WriteFile(specs[0].LogPath, []byte("an earlier run\nof this rank\nwith three lines\n"), 0o644)
			var prog simproc.SyncBuffer
			opts := testOptions()
			opts.Progress = &prog
			_, err := Start(context.Background(), specs, opts)
			var se *StartupError
			if !errors.As(err, &se) {
				t.Fatalf("Start error = %v, want a *StartupError", err)
			}
			msg := se.Error()
			lines := strings.Split(msg, "\n")
			want0 := fmt.Sprintf("engine rank 0 (port %d, GPU 0) failed to start: exited with status 1", specs[0].Port)
			if len(lines) < 5 || lines[0] != want0 || lines[1] != "cause: "+se.Reason ||
				!strings.HasPrefix(se.Reason, tt.Reason) || !strings.HasPrefix(lines[2], "hint: ") {
				t.Fatalf("the message does not lead with the exit, the cause and the hint:\n%s", msg)
			}
			for _, w := range tt.Hint {
				if !strings.Contains(lines[2], w) {
					t.Errorf("hint lacks %q:\n%s", w, msg)
				}
			}
			// 3 earlier lines, the warden's header, the fake's own line.
			if want := 3 + 1 + 1 + tt.Line; se.ReasonLine != want {
				t.Errorf("ReasonLine %d, want %d", se.ReasonLine, want)
			}
			log, _ := os.ReadFile(specs[0].LogPath)
			at := enginelogtest.Line(string(log), se.ReasonLine)
			if !strings.HasSuffix(at, se.Reason) {
				t.Errorf("line %d of the log is %q, not the cause", se.ReasonLine, at)
			}
			header := fmt.Sprintf("last lines of %s up to the cause, line %d:", specs[0].LogPath, se.ReasonLine)
			if lines[3] != header || !strings.Contains(msg, "\n  | "+at+"\nfull log: "+specs[0].LogPath) {
				t.Errorf("want %q, then the lines up to the cause and the log:\n%s", header, msg)
			}
			if se.LinesAfter > 1 && !strings.HasSuffix(msg, fmt.Sprintf("(%d more lines after the cause)", se.LinesAfter)) {
				t.Errorf("the last line does not count what follows the cause:\n%s", msg)
			}
			if !strings.Contains(prog.String(), "stopped") || !strings.Contains(prog.String(), se.Reason[:40]) {
				t.Errorf("the progress display's last state of the rank lacks the cause:\n%s", prog.String())
			}
		})
	}
}

// shellSpec is an "engine" that runs script in sh and never serves.
func shellSpec(t *testing.T, script string) []Spec {
	t.Helper()
	port, err := ports.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return []Spec{{Rank: 0, Port: port, Argv: []string{"/bin/sh", "-c", script},
		LogPath: filepath.Join(t.TempDir(), "rank-0.log")}}
}

// printing is a shell command that prints log to stdout.
func printing(t *testing.T, log string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "out.log")
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	return "cat " + strconv.Quote(p)
}

// An engine killed by SIGKILL while loading (the OOM killer, or someone):
// the message says so first, quotes no line of the log as the cause (not
// even an exception it logged while loading), and names the OOM killer.
func TestKilledEngineIsNoLogLine(t *testing.T) {
	log := enginelogtest.Fixture(t, "vllm-0.32-cpu-killed-loading.log") + "ValueError: an exception logged while loading\n" +
		"/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown\n"
	_, err := Start(context.Background(), shellSpec(t, printing(t, log)+"; kill -9 $$"), testOptions())
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	lines := strings.Split(se.Error(), "\n")
	if !strings.HasSuffix(lines[0], "failed to start: killed by signal killed") || se.Reason != "" ||
		!strings.HasPrefix(lines[1], "hint: the engine was killed by SIGKILL") || !strings.Contains(lines[1], "OOM killer") {
		t.Errorf("want the kill and the OOM hint first, no cause line:\n%s", se.Error())
	}
	if len(se.Context) != contextLines || !strings.HasPrefix(lines[2], "last lines of ") {
		t.Errorf("want the last %d lines as context, got %d:\n%s", contextLines, len(se.Context), se.Error())
	}
}

// A crash's reason: the cause, not the warning printed last (enginelog's
// TestWarningsAreNeverTheCause checks its Diagnosis of the same lines).
func TestCrashReasonIsNoWarning(t *testing.T) {
	log := enginelogtest.Warnings
	p := runToExit(t, "printf 'RuntimeError: the real one\\n'; "+printing(t, log)+"; exit 1")
	if got := crashReason(p); got != "exited with status 1: RuntimeError: the real one" {
		t.Errorf("crashReason = %q", got)
	}
	p = runToExit(t, printing(t, log)+"; exit 1")
	if got := crashReason(p); !strings.HasPrefix(got, "exited with status 1: Free memory on device (22.87") {
		t.Errorf("crashReason without a cause = %q, want the last line that is no warning", got)
	}
	p = runToExit(t, "printf 'ValueError: hours ago\\nINFO serving\\n'; kill -9 $$")
	if got := crashReason(p); got != "killed by signal killed" {
		t.Errorf("crashReason after a SIGKILL = %q, want the signal alone", got)
	}
}

// runToExit runs script in sh as an engine process and waits for its end.
func runToExit(t *testing.T, script string) *proc {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "r.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := spawn([]string{"/bin/sh", "-c", script}, os.Environ(), f, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the script did not end")
	}
	<-p.drained
	return p
}
