package bench

import (
	"strings"
	"testing"
	"time"
)

// The bench says at start how long its defaults run (issue 45: about 35
// minutes with only the current stage shown), and each stage's bar says
// where the run is.
func TestOverallProgress(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TimeScale = 1
	groups := groupSteps(plan(cfg.Stages, cfg.Variants, cfg.Alternate), cfg.carry())
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	o := newOverall(&cfg, groups, t0)
	if o.steps != len(cfg.Stages)*len(cfg.Variants) || o.steps == 0 {
		t.Fatalf("%d stage runs for stages %v and variants %v", o.steps, cfg.Stages, cfg.Variants)
	}
	want := time.Duration(o.steps) * (cfg.Stage + cfg.Warmup)
	if o.expected != want || o.atMost != want+time.Duration(len(groups))*cfg.Drain {
		t.Errorf("expected %v at most %v, want %v and %v plus the drains", o.expected, o.atMost, want, want)
	}
	if line := o.announce(&cfg); !strings.Contains(line, "10 stage runs of 3m0s: about 30m0s in all") {
		t.Errorf("announce: %q", line)
	}
	if got := o.next(t0); got != "run 1/10 at 0s of ~30m0s" {
		t.Errorf("first bar: %q", got)
	}
	if got := o.next(t0.Add(3*time.Minute + 12*time.Second)); got != "run 2/10 at 3m12s of ~30m0s" {
		t.Errorf("second bar: %q", got)
	}
}
