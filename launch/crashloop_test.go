package launch

import (
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
