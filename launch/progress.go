package launch

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress is the live startup display: one line per rank with its state,
// elapsed time and (while loading) the engine's last log line. On a terminal
// it redraws in place; elsewhere it prints a plain line when a rank changes
// state.
type progress struct {
	w     io.Writer
	tty   bool
	width int
	ranks []*rank
	start time.Time

	quit  chan struct{}
	wg    sync.WaitGroup
	last  []State // plain mode: the state last printed per rank
	drawn int     // tty mode: lines drawn last time
}

const progressEvery = 250 * time.Millisecond

func startProgress(w io.Writer, ranks []*rank) *progress {
	pr := &progress{w: w, ranks: ranks, start: time.Now(), quit: make(chan struct{}), width: 100}
	if w == nil {
		return pr
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		pr.tty = true
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
			pr.width = cols - 1
		}
	}
	pr.last = make([]State, len(ranks))
	for i := range pr.last {
		pr.last[i] = -1
	}
	pr.wg.Add(1)
	go pr.loop()
	return pr
}

func (pr *progress) loop() {
	defer pr.wg.Done()
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		pr.draw()
		select {
		case <-pr.quit:
			pr.draw()
			return
		case <-t.C:
		}
	}
}

// stop draws the final state and ends the display.
func (pr *progress) stop() {
	if pr.w == nil {
		return
	}
	close(pr.quit)
	pr.wg.Wait()
}

func (pr *progress) draw() {
	now := time.Now()
	if !pr.tty {
		for i, r := range pr.ranks {
			st, since, last := r.snapshot()
			if st == pr.last[i] {
				continue
			}
			pr.last[i] = st
			fmt.Fprintln(pr.w, pr.line(r, st, now, since, last))
		}
		return
	}
	var b strings.Builder
	if pr.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", pr.drawn)
	}
	for _, r := range pr.ranks {
		st, since, last := r.snapshot()
		b.WriteString("\r\x1b[2K" + truncate(pr.line(r, st, now, since, last), pr.width) + "\n")
	}
	pr.drawn = len(pr.ranks)
	io.WriteString(pr.w, b.String())
}

// line renders one rank: "rank 0  GPU 0  :8100  loading   12s  <last log line>".
// Elapsed time counts from the start of the display, frozen once healthy.
func (pr *progress) line(r *rank, st State, now, since time.Time, last string) string {
	dev := r.spec.where()
	if dev == "" {
		dev = "-"
	}
	if len(dev) > 18 {
		dev = dev[:17] + "…"
	}
	if st == Ready || st == Stopped {
		now = since
	}
	elapsed := now.Sub(pr.start).Round(100 * time.Millisecond)
	s := fmt.Sprintf("rank %-2d %-18s :%-5d %-8s %6s", r.spec.Rank, dev, r.spec.Port, st, elapsed)
	if st == Loading || st == Down || st == Stopped {
		if last = strings.TrimSpace(last); last != "" {
			s += "  " + last
		}
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
