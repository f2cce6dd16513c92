package bench

import (
	"fmt"
	"time"
)

// overall is the whole run's advance, for the progress bars' titles: which
// stage run of how many, and the time spent of the expected total.
type overall struct {
	steps, done      int
	began            time.Time
	expected, atMost time.Duration
}

// estimate is the run's expected wall time for its groups of steps (a
// group is one series with carry, else one step): each group's warm-up
// (once per series with carry, once per step without) and its stages; and
// at most that plus a full drain after each group, for turns that run past
// a stage's end.
func estimate(cfg *Config, groups [][]step) (expected, atMost time.Duration) {
	for _, g := range groups {
		expected += cfg.wall(cfg.Warmup) + time.Duration(len(g))*cfg.wall(cfg.Stage)
		atMost += cfg.wall(cfg.Drain)
	}
	return expected, expected + atMost
}

// newOverall starts the count for groups at now.
func newOverall(cfg *Config, groups [][]step, now time.Time) *overall {
	o := &overall{began: now}
	for _, g := range groups {
		o.steps += len(g)
	}
	o.expected, o.atMost = estimate(cfg, groups)
	return o
}

// announce is the line the bench starts with: how many stage runs, and how
// long they take.
func (o *overall) announce(cfg *Config) string {
	return fmt.Sprintf("warden bench: %d stage runs of %s: about %s in all (up to %s if turns run into every drain of %s)",
		o.steps, round(cfg.wall(cfg.Stage)), round(o.expected), round(o.atMost), round(cfg.wall(cfg.Drain)))
}

// next counts one more stage run begun at now and returns the title prefix
// its bar carries: "run 3/10 at 6m12s of ~30m0s".
func (o *overall) next(now time.Time) string {
	o.done++
	return fmt.Sprintf("run %d/%d at %s of ~%s", o.done, o.steps, round(now.Sub(o.began)), round(o.expected))
}

func round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}
