package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCrashLoopDelayDoublesPerFailureInARowUpToTheCap(t *testing.T) {
	var l crashLoop
	var got []time.Duration
	for range 9 {
		got = append(got, l.fail(time.Second, time.Minute))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, time.Minute, time.Minute, time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("delays (-want +got):\n%s", d)
	}
	if l.failures != 9 {
		t.Errorf("failures = %d, want 9", l.failures)
	}
	l = crashLoop{} // a run that lasted StableAfter
	if d := l.fail(time.Second, time.Minute); d != time.Second {
		t.Errorf("first delay after a stable run = %v, want 1s", d)
	}
}

// crashFourTimes starts one fake engine under opts, makes it crash right
// after each time it is healthy, and returns the four Crash records and
// what the rank logged.
func crashFourTimes(t *testing.T, opts Options) ([]Crash, string) {
	t.Helper()
	specs := fakeSpecs(t, t.TempDir(), 1, func(int) []string { return nil })
	ready, crashes := make(chan struct{}, 8), make(chan Crash, 8)
	opts.OnState = func(_ int, s State, _ string) {
		if s == Ready {
			ready <- struct{}{}
		}
	}
	opts.OnCrash = func(_ int, c Crash) { crashes <- c }
	var log bytes.Buffer
	var mu sync.Mutex
	opts.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))
	g, err := Start(context.Background(), specs, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer g.Stop(context.Background())
	var got []Crash
	for range 4 {
		<-ready
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/crash", specs[0].Port)); err == nil {
			resp.Body.Close()
		}
		got = append(got, <-crashes)
	}
	if last, ok := g.LastCrash(0); !ok || last != got[3] {
		t.Errorf("LastCrash = %+v %v, want the fourth crash", last, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	return got, log.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Crashes within StableAfter of becoming healthy are a crash loop: each
// restart waits twice as long, the third failure is said once with its
// cause, the fourth in one short line.
func TestCrashesSoonAfterHealthyBackOffAndAreSaidOnce(t *testing.T) {
	opts := testOptions()
	got, log := crashFourTimes(t, opts)
	for i, c := range got {
		if c.Failures != i+1 || c.Delay != opts.RestartMin<<i || c.Restarts != i || c.Loop != (i >= 2) ||
			!strings.Contains(c.Cause, "exited with status 3: RuntimeError: fake engine crashing") {
			t.Errorf("crash %d: %+v; want failures %d, delay %v, restarts %d, loop %v and the cause", i+1, c, i+1,
				opts.RestartMin<<i, i, i >= 2)
		}
	}
	if n, m := strings.Count(log, "engine crash loop: 3 failures in a row"), strings.Count(log, "engine still failing"); n != 1 || m != 1 {
		t.Errorf("crash loop said %d times, short lines %d; want 1 and 1:\n%s", n, m, log)
	}
	if !strings.Contains(log, `fix="read the rank's log for the cause: `) {
		t.Errorf("no fix (the log path, for a cause without a hint):\n%s", log)
	}
}

// A run that lasted StableAfter ends the loop: every crash is the first.
func TestACrashAfterAStableRunRestartsAtOnce(t *testing.T) {
	opts := testOptions()
	opts.StableAfter = time.Nanosecond
	got, log := crashFourTimes(t, opts)
	for i, c := range got {
		if c.Failures != 1 || c.Delay != opts.RestartMin || c.Loop {
			t.Errorf("crash %d after a stable run: %+v; want failures 1, delay %v", i+1, c, opts.RestartMin)
		}
	}
	if strings.Contains(log, "crash loop") {
		t.Errorf("a crash loop said of crashes after stable runs:\n%s", log)
	}
}
