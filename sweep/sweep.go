// Package sweep is `warden sweep`, the dp x tp question in one command. For
// each layout it runs `warden serve` (this binary, so the same launch code)
// with the layout's --dp and --tp on a free loopback port, waits until it is
// ready, runs the same seeded bench against it, stops it, and writes one
// side-by-side table (sweep.md, sweep.csv, sweep.json, sweep.svg;
// report.go) with a verdict per stage. A layout that cannot start is
// reported with the reason serve gave and skipped.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/warden/bench"
	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/router/schema"
)

// Options are a sweep's settings as its command line gives them.
type Options struct {
	Layouts      string        // --layouts: "4x1,2x2,1x4"
	Args         []string      // after the first --: serve flags [-- engine arguments]
	Out          string        // results folder ("": bench-results/sweep-<time>)
	ReadyTimeout time.Duration // longest a layout may take to get ready
	Bench        bench.Options // the load (its target, switching, folder and decision log are the sweep's)
	TimeScaleSet bool          // --time-scale given: it wins over the engines' --sim-time-scale
	Stdout       io.Writer     // the table
	Stderr       io.Writer     // progress and logs
}

// Layout is one data-parallel x tensor-parallel split of the cards.
type Layout struct{ DP, TP int }

func (l Layout) String() string { return fmt.Sprintf("%dx%d", l.DP, l.TP) }

// parseLayouts reads "4x1,2x2,1x4" (dp x tp).
func parseLayouts(s string) ([]Layout, error) {
	var out []Layout
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, t, ok := strings.Cut(strings.ToLower(f), "x")
		dp, err1 := strconv.Atoi(d)
		tp, err2 := strconv.Atoi(t)
		if !ok || err1 != nil || err2 != nil || dp < 1 || tp < 1 || dp > 64 || tp > 64 {
			return nil, fmt.Errorf("--layouts: %q is not DPxTP (e.g. 4x1,2x2,1x4)", f)
		}
		l := Layout{dp, tp}
		if slices.Contains(out, l) {
			return nil, fmt.Errorf("--layouts: %s is listed twice", l)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, errors.New("--layouts names no layout (e.g. 4x1,2x2,1x4)")
	}
	return out, nil
}

// reserved are serve flags the sweep sets itself.
var reserved = []string{"--dp", "--tp", "--port", "--host", "--log-dir"}

// splitServeArgs separates the serve flags from the engine arguments (after
// a second --) and refuses the flags the sweep sets.
func splitServeArgs(args []string) (serve, engine []string, err error) {
	serve, engine, _ = argv.Split(args)
	if name, ok := argv.Which(serve, reserved...); ok {
		return nil, nil, fmt.Errorf("%s is set by the sweep (--layouts, a free loopback port, a log folder per layout); leave it out of the serve flags", name)
	}
	return serve, engine, nil
}

// simTimeScale returns the --sim-time-scale among the engine arguments, 0
// if none: the bench must read times at the same scale.
func simTimeScale(engine []string) float64 {
	if v, ok := argv.Value(engine, "--sim-time-scale"); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	return 0
}

// Main is `warden sweep`: every layout in turn, until done or
// SIGINT/SIGTERM (the layout under test is stopped, the partial results
// written, exit status 130). The error carries the exit status: 2 for bad
// options, 1 when no layout could start.
func Main(ctx context.Context, o Options) error {
	fail := func(code int, msg string) error { return exit.New(code, "warden sweep: "+msg) }
	layouts, err := parseLayouts(o.Layouts)
	if err != nil {
		return fail(2, err.Error())
	}
	serveArgs, engineArgs, err := splitServeArgs(o.Args)
	if err != nil {
		return fail(2, err.Error())
	}
	if len(serveArgs) == 0 {
		return fail(2, "give the serve flags after --, e.g. warden sweep --layouts 4x1,2x2 -- --model M --engine sim")
	}
	out := o.Out
	if out == "" {
		out = filepath.Join("bench-results", "sweep-"+time.Now().Format("20060102-150405"))
	}
	scale := o.Bench.TimeScale
	if !o.TimeScaleSet {
		if s := simTimeScale(engineArgs); s > 0 {
			scale = s
		}
	}
	// Check the bench flags once before anything starts.
	if _, err := o.Bench.Target("http://127.0.0.1:1", out, scale); err != nil {
		return fail(2, err.Error())
	}
	self, err := os.Executable()
	if err != nil {
		return fail(1, "cannot find this program to run serve: "+err.Error())
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fail(1, err.Error())
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := &sweep{Options: o, self: self, out: out, scale: scale, serveArgs: serveArgs, engineArgs: engineArgs}
	res := &Result{StartedAt: time.Now(), ServeFlags: serveArgs, EngineArgs: engineArgs}
	started := time.Now()
	var perLayout time.Duration
	for i, l := range layouts {
		res.Layouts = append(res.Layouts, l.String())
		left := "unknown"
		if perLayout > 0 {
			left = (perLayout * time.Duration(len(layouts)-i)).Round(time.Second).String()
		}
		fmt.Fprintf(o.Stderr, "warden sweep: layout %d/%d: %s (dp %d x tp %d); %s elapsed, about %s left\n",
			i+1, len(layouts), l, l.DP, l.TP, time.Since(started).Round(time.Second), left)
		t0 := time.Now()
		rows, err := s.layout(ctx, l)
		if ctx.Err() != nil {
			res.Rows = append(res.Rows, rows...)
			_ = write(out, res)
			return fail(130, "interrupted; the layout under test was stopped; partial results in "+out)
		}
		if err != nil {
			fmt.Fprintf(o.Stderr, "warden sweep: layout %s skipped: %v\n", l, err)
			res.Rows = append(res.Rows, Row{Layout: l.String(), DP: l.DP, TP: l.TP, SkippedReason: err.Error()})
			continue
		}
		res.Rows = append(res.Rows, rows...)
		perLayout = time.Since(t0)
	}
	res.Verdicts = verdicts(res.Rows)
	if err := write(out, res); err != nil {
		return fail(1, "writing results: "+err.Error())
	}
	fmt.Fprint(o.Stdout, markdown(res))
	fmt.Fprintf(o.Stderr, "warden sweep: %d layouts in %s; results in %s\n", len(layouts), time.Since(started).Round(time.Second), out)
	for _, r := range res.Rows {
		if r.SkippedReason == "" {
			return nil
		}
	}
	return fail(1, "no layout could start (reasons above)")
}

// sweep is one sweep's settings, checked.
type sweep struct {
	Options
	self, out             string
	scale                 float64
	serveArgs, engineArgs []string
}

// layout serves one layout, benches it and stops it.
func (s *sweep) layout(ctx context.Context, l Layout) ([]Row, error) {
	dir := filepath.Join(s.out, l.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := ports.Loopback()
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := append([]string{"serve"}, s.serveArgs...)
	args = append(args, "--dp", strconv.Itoa(l.DP), "--tp", strconv.Itoa(l.TP), "--port", strconv.Itoa(port),
		"--host", "127.0.0.1", "--log-dir", filepath.Join(dir, "engines"))
	if len(s.engineArgs) > 0 {
		args = append(append(args, "--"), s.engineArgs...)
	}
	srv, err := wardenproc.Start(s.self, args, filepath.Join(dir, "warden.log"))
	if err != nil {
		return nil, fmt.Errorf("starting serve: %w", err)
	}
	defer srv.Stop(2 * time.Minute)
	if err := waitServe(ctx, srv, url, s.ReadyTimeout); err != nil {
		return nil, err
	}
	cfg, err := s.Bench.Target(url, filepath.Join(dir, "bench"), s.scale)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(s.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := &bench.Runner{Cfg: cfg, Log: log.With("layout", l.String()), Stderr: s.Stderr}
	br, runErr := r.Run(ctx, false)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // also after an interrupt
	st, _, stErr := schema.Fetch(sctx, http.DefaultClient, url)
	cancel()
	if br != nil {
		if err := bench.WriteAll(cfg.Out, br); err != nil {
			return nil, err
		}
	}
	if br == nil || (runErr != nil && ctx.Err() == nil) {
		return nil, fmt.Errorf("bench: %w", runErr)
	}
	return layoutRows(l, br, st, stErr), nil
}

// waitServe waits until the layout's warden answers /health with 200; when
// it exits first, the error is the reason serve gave.
func waitServe(ctx context.Context, srv *wardenproc.Proc, url string, timeout time.Duration) error {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := wardenproc.Poll(tctx, &http.Client{Timeout: 2 * time.Second}, url, 250*time.Millisecond, srv.Done())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wardenproc.ErrExited):
		return errors.New(srv.Reason())
	case ctx.Err() != nil:
		return ctx.Err()
	case tctx.Err() != nil:
		return fmt.Errorf("not ready after %v (see its log)", timeout)
	}
	return err
}

// layoutRows turns one layout's bench stages and final status into rows.
func layoutRows(l Layout, br *bench.Results, st schema.Status, stErr error) []Row {
	perReplica, total := 0, 0
	if stErr == nil {
		for _, r := range st.Replicas {
			total += r.KVCapacityTokens
			perReplica = max(perReplica, r.KVCapacityTokens)
		}
	}
	var rows []Row
	for _, s := range br.Stages {
		row := Row{Layout: l.String(), DP: l.DP, TP: l.TP, Sessions: s.Sessions, OutputPerMin: s.OutputPerMin,
			TTFBP50: s.TTFBP50, TTFBP95: s.TTFBP95, PrefixHitPct: s.PrefixHitPct, KVPerReplica: perReplica,
			KVTotal: total, Errors: s.Errors}
		row.WorkingSet = workingSet(br.Turns, s.Sessions)
		row.SessionsFit = sessionsFit(l.DP, perReplica, row.WorkingSet, br.Config.SystemTokens)
		rows = append(rows, row)
	}
	return rows
}

// workingSet is a conversation's KV footprint at its largest, measured: per
// session of the stage its largest turn (prompt + output tokens, the
// context the engine held for it), averaged over the sessions that
// finished, or over all when none did (then an underestimate). 0 when the
// stage has no successful turn.
func workingSet(turns []bench.TurnRecord, sessions int) int {
	type acc struct {
		max      int
		finished bool
	}
	per := map[string]*acc{}
	for _, t := range turns {
		if t.Sessions != sessions || t.Subagent || t.Error != "" || t.PromptTokens <= 0 {
			continue
		}
		a := per[t.SessionID]
		if a == nil {
			a = &acc{}
			per[t.SessionID] = a
		}
		a.max = max(a.max, t.PromptTokens+t.OutputTokens)
		a.finished = a.finished || t.LastTurn
	}
	mean := func(finishedOnly bool) int {
		sum, n := 0, 0
		for _, a := range per {
			if a.finished || !finishedOnly {
				sum += a.max
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return sum / n
	}
	if ws := mean(true); ws > 0 {
		return ws
	}
	return mean(false)
}

// sessionsFit is how many conversations of working set ws fit the layout's
// KV at once: per replica its capacity less the shared system prompt (held
// once) over a conversation's own part, times the replicas. 0 when unknown.
func sessionsFit(dp, perReplica, ws, shared int) int {
	own := ws - shared
	if ws <= 0 || perReplica <= shared || own <= 0 {
		return 0
	}
	return dp * ((perReplica - shared) / own)
}
