package serve

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

// restartStarts returns the times of the warden's "engine started"
// lines for rank's restarts, from its stderr (slog's time= field).
func restartStarts(t *testing.T, stderr string, rank string) []time.Time {
	t.Helper()
	var at []time.Time
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.Contains(line, `msg="engine started"`) || !strings.Contains(line, " rank="+rank+" ") ||
			!strings.Contains(line, "what=restart") {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.Fields(line)[0], "time="))
		if err != nil {
			t.Fatalf("no time in %q: %v", line, err)
		}
		at = append(at, ts)
	}
	return at
}

// An engine that fails at every start is restarted after a growing delay
// while the other replica serves; the cause and its fix are logged once;
// it is back once the cause is gone.
func TestServeCrashLoopBacksOffAndSaysTheCauseOnce(t *testing.T) {
	failFile := filepath.Join(t.TempDir(), "fail")
	w := startServe(t, "--dp", "2", "--", "--sim-fail-start-if", failFile)
	const oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.52 GiB of which 1.02 GiB is free."
	if err := os.WriteFile(failFile, []byte(oom+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := syscall.Kill(int(enginePID(t, w, w.status(t).Replicas[0].Port)), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	served := 0
	simproc.Poll(t, "the fourth failure in a row", func() bool {
		if resp, body := post(t, w.url+"/v1/chat/completions", shortChat, nil); resp.StatusCode != 200 {
			t.Fatalf("request %d while rank 0 crash-loops: %s %s", served, resp.Status, body)
		}
		served++
		return strings.Contains(w.stderr.String(), "engine still failing")
	})
	st := w.status(t)
	if st.Replicas[0].Up || !st.Replicas[1].Up {
		t.Errorf("up: rank 0 %v, rank 1 %v; want the crash-looping rank out and the other in", st.Replicas[0].Up, st.Replicas[1].Up)
	}
	if c := st.Replicas[0].LastCrash; c == nil || !c.CrashLoop || c.Failures < 3 || !strings.Contains(c.Fix, "out of GPU memory") ||
		c.RetrySeconds <= 0 {
		t.Errorf("/warden/status last_crash of the crash-looping rank: %+v; want the loop, its failures, fix and the wait", c)
	}
	log := w.stderr.String()
	const loop, fix = "engine crash loop:", "out of GPU memory: the model may not fit one GPU"
	if n, m := strings.Count(log, loop), strings.Count(log, fix); n != 1 || m != 1 {
		t.Errorf("the crash loop was announced %d times and its fix printed %d times, want once each:\n%s", n, m, log)
	}
	if after := log[strings.Index(log, loop):]; strings.Count(after, "CUDA out of memory") != 1 {
		t.Errorf("the cause was repeated after the announcement:\n%s", after)
	}
	starts := restartStarts(t, log, "0")
	if len(starts) < 3 {
		t.Fatalf("%d restarts of rank 0 logged, want 3:\n%s", len(starts), log)
	}
	gaps := []time.Duration{starts[0].Sub(killed), starts[1].Sub(starts[0]), starts[2].Sub(starts[1])}
	for i, g := range gaps {
		if least := time.Second << i; g < least {
			t.Errorf("restart %d came %v after the one before, want at least %v (gaps %v)", i+1, g, least, gaps)
		}
	}
	if gaps[2] <= gaps[1] {
		t.Errorf("the spacing of restarts did not grow: %v", gaps)
	}
	t.Logf("rank 0's restarts after the kill: gaps %v; %d requests served by rank 1 meanwhile", gaps, served)

	if err := os.Remove(failFile); err != nil {
		t.Fatal(err)
	}
	simproc.Poll(t, "rank 0 back after the cause is gone", func() bool {
		r := w.status(t).Replicas[0]
		return r.Up && r.Restarts == 1
	})
	if resp, body := post(t, w.url+"/v1/chat/completions", shortChat, map[string]string{"X-Warden-Replica": "0"}); resp.StatusCode != 200 {
		t.Fatalf("on rank 0 after it came back: %s %s", resp.Status, body)
	}
	t.Logf("restarts of rank 0 logged: %d; the announcement:\n%s", len(restartStarts(t, w.stderr.String(), "0")),
		log[strings.Index(log, loop)-60:][:400])
}
