package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows one stage's advance; noProgress is the silent one for
// tests and --no-progress.
type progress interface {
	set(elapsed time.Duration, turns, inflight int)
	describe(s string)
	finish()
}

type noProgress struct{}

func (noProgress) set(time.Duration, int, int) {}
func (noProgress) describe(string)             {}
func (noProgress) finish()                     {}

// barProgress is a progressbar over the stage's wall-clock duration, in
// milliseconds, with the turn count in its description.
type barProgress struct {
	bar   *progressbar.ProgressBar
	title string
	total time.Duration
}

func newBarProgress(w io.Writer, title string, total time.Duration) *barProgress {
	bar := progressbar.NewOptions64(total.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(title),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	return &barProgress{bar: bar, title: title, total: total}
}

func (p *barProgress) set(elapsed time.Duration, turns, inflight int) {
	p.bar.Describe(fmt.Sprintf("%s  turns %d, in flight %d", p.title, turns, inflight))
	_ = p.bar.Set64(min(elapsed, p.total).Milliseconds())
}

func (p *barProgress) describe(s string) {
	p.bar.Describe(p.title + "  " + s)
}

func (p *barProgress) finish() {
	_ = p.bar.Finish()
}
