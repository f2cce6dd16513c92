package main

// warden sweep: the dp x tp question in one command. For each layout it
// runs `warden serve` (this binary, so the same launch code) with the
// layout's --dp and --tp on a free loopback port, waits until it is ready,
// runs the same seeded bench against it, stops it, and writes one
// side-by-side table (sweep.md, sweep.csv, sweep.json, sweep.svg) with a
// verdict per stage. A layout that cannot start is reported with the
// reason serve gave and skipped.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/bench"
	"github.com/lmwarden/warden/internal/command"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/proxy/panel"
)

// layout is one data-parallel x tensor-parallel split of the cards.
type layout struct{ DP, TP int }

func (l layout) String() string { return fmt.Sprintf("%dx%d", l.DP, l.TP) }

// parseLayouts reads "4x1,2x2,1x4" (dp x tp).
func parseLayouts(s string) ([]layout, error) {
	var out []layout
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
		l := layout{dp, tp}
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

// sweepReserved are serve flags the sweep sets itself.
var sweepReserved = []string{"--dp", "--tp", "--port", "--host", "--log-dir"}

// splitServeArgs separates the serve flags from the engine arguments (after
// a second --) and refuses the flags the sweep sets.
func splitServeArgs(args []string) (serve, engine []string, err error) {
	serve = args
	if i := slices.Index(args, "--"); i >= 0 {
		serve, engine = args[:i], args[i+1:]
	}
	for _, a := range serve {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(sweepReserved, name) {
			return nil, nil, fmt.Errorf("%s is set by the sweep (--layouts, a free loopback port, a log folder per layout); leave it out of the serve flags", name)
		}
	}
	return serve, engine, nil
}

// simTimeScale returns the --sim-time-scale among the engine arguments, 0
// if none: the bench must read times at the same scale.
func simTimeScale(engine []string) float64 {
	for i, a := range engine {
		v, ok := strings.CutPrefix(a, "--sim-time-scale=")
		if !ok && a == "--sim-time-scale" && i+1 < len(engine) {
			v, ok = engine[i+1], true
		}
		if ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return 0
}

func sweepCommand() *cli.Command {
	flags := append([]cli.Flag{
		&cli.StringFlag{Name: "layouts", Value: "4x1,2x2,1x4", EnvVars: envVars("SWEEP_LAYOUTS"),
			Usage: "layouts to compare, DPxTP comma separated (dp replicas of tp cards each)"},
		&cli.StringFlag{Name: "out", EnvVars: envVars("SWEEP_OUT"),
			Usage: "results folder (default bench-results/sweep-<time>): sweep.md, sweep.csv, sweep.json, sweep.svg, and per layout its bench results and logs"},
		&cli.DurationFlag{Name: "ready-timeout", Value: 30 * time.Minute, EnvVars: envVars("SWEEP_READY_TIMEOUT"),
			Usage: "longest a layout may take to get ready before it is skipped"},
	}, command.BenchLoadFlags()...)
	return &cli.Command{
		Name:      "sweep",
		Usage:     "compare dp x tp layouts of the same cards: serve each, run the same bench, one table",
		ArgsUsage: "[flags] -- SERVE-FLAGS [-- ENGINE-ARGS]",
		Description: "For each layout in --layouts, starts `warden serve SERVE-FLAGS --dp D --tp T` on a free\n" +
			"loopback port (the same launch code as serve), waits until it is ready, runs the bench\n" +
			"(the bench flags below, one policy: the warden's), stops it, and writes one side-by-side table\n" +
			"per layout and stage: output tok/min, TTFB p50/p95, prefix hit %, KV capacity, and the\n" +
			"sessions whose working set fits; a verdict per stage says which layout wins what.\n" +
			"A layout that cannot start is reported with serve's reason and skipped.\n\n" +
			"Example (the reference rig on the simulator, 4 cards):\n" +
			"  warden sweep --layouts 4x1,2x2,1x4 --stages 4,8,16,24,32 --warmup 3m -- \\\n" +
			"    --model Qwen/Qwen3-4B-Instruct-2507 --engine sim --max-num-seqs 32 -- --sim-time-scale 10",
		Flags:  flags,
		Action: runSweep,
	}
}

// sweepRow is one layout at one stage.
type sweepRow struct {
	Layout        string   `json:"layout"`
	DP            int      `json:"dp"`
	TP            int      `json:"tp"`
	Sessions      int      `json:"sessions"`
	OutputPerMin  float64  `json:"output_tokens_per_min"`
	TTFBP50       *float64 `json:"ttfb_p50_s,omitempty"`
	TTFBP95       *float64 `json:"ttfb_p95_s,omitempty"`
	PrefixHitPct  *float64 `json:"prefix_hit_pct,omitempty"`
	KVPerReplica  int      `json:"kv_tokens_per_replica"`
	KVTotal       int      `json:"kv_tokens_total"`
	WorkingSet    int      `json:"working_set_tokens"` // a conversation's, at its last turn (measured)
	SessionsFit   int      `json:"sessions_fit"`
	Errors        int      `json:"errors"`
	SkippedReason string   `json:"skipped,omitempty"`
}

// sweepResult is the whole sweep.
type sweepResult struct {
	StartedAt  time.Time  `json:"started_at"`
	ServeFlags []string   `json:"serve_flags"`
	EngineArgs []string   `json:"engine_args"`
	Layouts    []string   `json:"layouts"`
	Rows       []sweepRow `json:"rows"`
	Verdicts   []string   `json:"verdicts"`
}

func runSweep(c *cli.Context) error {
	layouts, err := parseLayouts(c.String("layouts"))
	if err != nil {
		return cli.Exit("warden sweep: "+err.Error(), 2)
	}
	serveArgs, engineArgs, err := splitServeArgs(c.Args().Slice())
	if err != nil {
		return cli.Exit("warden sweep: "+err.Error(), 2)
	}
	if len(serveArgs) == 0 {
		return cli.Exit("warden sweep: give the serve flags after --, e.g. warden sweep --layouts 4x1,2x2 -- --model M --engine sim", 2)
	}
	out := c.String("out")
	if out == "" {
		out = filepath.Join("bench-results", "sweep-"+time.Now().Format("20060102-150405"))
	}
	scale := c.Float64("time-scale")
	if !c.IsSet("time-scale") {
		if s := simTimeScale(engineArgs); s > 0 {
			scale = s
		}
	}
	// Check the bench flags once before anything starts.
	if _, err := command.BenchOptions(c).Target("http://127.0.0.1:1", out, scale); err != nil {
		return cli.Exit("warden sweep: "+err.Error(), 2)
	}
	self, err := os.Executable()
	if err != nil {
		return cli.Exit("warden sweep: cannot find this program to run serve: "+err.Error(), 1)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return cli.Exit("warden sweep: "+err.Error(), 1)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newLogger()
	res := &sweepResult{StartedAt: time.Now(), ServeFlags: serveArgs, EngineArgs: engineArgs}
	started := time.Now()
	var perLayout time.Duration
	for i, l := range layouts {
		res.Layouts = append(res.Layouts, l.String())
		left := "unknown"
		if perLayout > 0 {
			left = (perLayout * time.Duration(len(layouts)-i)).Round(time.Second).String()
		}
		fmt.Fprintf(os.Stderr, "warden sweep: layout %d/%d: %s (dp %d x tp %d); %s elapsed, about %s left\n",
			i+1, len(layouts), l, l.DP, l.TP, time.Since(started).Round(time.Second), left)
		t0 := time.Now()
		rows, err := sweepLayout(ctx, c, self, l, serveArgs, engineArgs, out, scale, log)
		if ctx.Err() != nil {
			res.Rows = append(res.Rows, rows...)
			_ = writeSweep(out, res)
			return cli.Exit("warden sweep: interrupted; the layout under test was stopped; partial results in "+out, 130)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "warden sweep: layout %s skipped: %v\n", l, err)
			res.Rows = append(res.Rows, sweepRow{Layout: l.String(), DP: l.DP, TP: l.TP, SkippedReason: err.Error()})
			continue
		}
		res.Rows = append(res.Rows, rows...)
		perLayout = time.Since(t0)
	}
	res.Verdicts = verdicts(res.Rows)
	if err := writeSweep(out, res); err != nil {
		return cli.Exit("warden sweep: writing results: "+err.Error(), 1)
	}
	fmt.Fprint(c.App.Writer, sweepMarkdown(res))
	fmt.Fprintf(os.Stderr, "warden sweep: %d layouts in %s; results in %s\n", len(layouts), time.Since(started).Round(time.Second), out)
	for _, r := range res.Rows {
		if r.SkippedReason == "" {
			return nil
		}
	}
	return cli.Exit("warden sweep: no layout could start (reasons above)", 1)
}

// sweepLayout serves one layout, benches it and stops it.
func sweepLayout(ctx context.Context, c *cli.Context, self string, l layout, serveArgs, engineArgs []string,
	out string, scale float64, log interface{ Info(string, ...any) }) ([]sweepRow, error) {
	dir := filepath.Join(out, l.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := ports.Loopback()
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	argv := append([]string{"serve"}, serveArgs...)
	argv = append(argv, "--dp", strconv.Itoa(l.DP), "--tp", strconv.Itoa(l.TP), "--port", strconv.Itoa(port),
		"--host", "127.0.0.1", "--log-dir", filepath.Join(dir, "engines"))
	if len(engineArgs) > 0 {
		argv = append(append(argv, "--"), engineArgs...)
	}
	srv, err := wardenproc.Start(self, argv, filepath.Join(dir, "warden.log"))
	if err != nil {
		return nil, fmt.Errorf("starting serve: %w", err)
	}
	defer srv.Stop(2 * time.Minute)
	if err := waitServe(ctx, srv, url, c.Duration("ready-timeout")); err != nil {
		return nil, err
	}
	cfg, err := command.BenchOptions(c).Target(url, filepath.Join(dir, "bench"), scale)
	if err != nil {
		return nil, err
	}
	r := &bench.Runner{Cfg: cfg, Log: newLogger().With("layout", l.String()), Stderr: os.Stderr}
	br, runErr := r.Run(ctx, false)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // also after an interrupt
	st, _, stErr := panel.FetchStatus(sctx, http.DefaultClient, url)
	cancel()
	if br != nil {
		if err := bench.WriteAll(cfg.Out, br); err != nil {
			return nil, err
		}
	}
	if br == nil || (runErr != nil && ctx.Err() == nil) {
		return nil, fmt.Errorf("bench: %w", runErr)
	}
	rows := layoutRows(l, br, st, stErr)
	return rows, nil
}

// layoutRows turns one layout's bench stages and final status into rows.
func layoutRows(l layout, br *bench.Results, st panel.Status, stErr error) []sweepRow {
	perReplica, total := 0, 0
	if stErr == nil {
		for _, r := range st.Replicas {
			total += r.KVCapacityTokens
			perReplica = max(perReplica, r.KVCapacityTokens)
		}
	}
	var rows []sweepRow
	for _, s := range br.Stages {
		row := sweepRow{Layout: l.String(), DP: l.DP, TP: l.TP, Sessions: s.Sessions, OutputPerMin: s.OutputPerMin,
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

// verdicts says per stage which layout wins output, p50, p95 and hits.
func verdicts(rows []sweepRow) []string {
	var stages []int
	by := map[int][]sweepRow{}
	for _, r := range rows {
		if r.SkippedReason != "" {
			continue
		}
		if _, ok := by[r.Sessions]; !ok {
			stages = append(stages, r.Sessions)
		}
		by[r.Sessions] = append(by[r.Sessions], r)
	}
	slices.Sort(stages)
	var out []string
	for _, n := range stages {
		rs := by[n]
		if len(rs) < 2 {
			continue
		}
		var parts []string
		parts = append(parts, best(rs, "output", func(r sweepRow) (float64, bool) { return r.OutputPerMin, true }, true, "%.0f tok/min", false))
		parts = append(parts, best(rs, "TTFB p50", func(r sweepRow) (float64, bool) { return deref(r.TTFBP50) }, false, "%.2f s", false))
		parts = append(parts, best(rs, "TTFB p95", func(r sweepRow) (float64, bool) { return deref(r.TTFBP95) }, false, "%.2f s", false))
		parts = append(parts, best(rs, "prefix hits", func(r sweepRow) (float64, bool) { return deref(r.PrefixHitPct) }, true, "%.1f %%", true))
		out = append(out, fmt.Sprintf("%d sessions: %s", n, strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), "; ")))
	}
	return out
}

func deref(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// best names the winning layout on one column and its margin over the
// runner-up, relative or (points, for percentages) as a difference; "" when
// fewer than two layouts have the value.
func best(rs []sweepRow, what string, val func(sweepRow) (float64, bool), higher bool, format string, points bool) string {
	type lv struct {
		name string
		v    float64
	}
	var vs []lv
	for _, r := range rs {
		if v, ok := val(r); ok {
			vs = append(vs, lv{r.Layout, v})
		}
	}
	if len(vs) < 2 {
		return ""
	}
	slices.SortStableFunc(vs, func(a, b lv) int {
		if higher {
			a, b = b, a
		}
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	w, r := vs[0], vs[1]
	margin := ""
	switch {
	case points:
		margin = fmt.Sprintf(", %+.1f points against %s's "+format, w.v-r.v, r.name, r.v)
	case r.v != 0:
		margin = fmt.Sprintf(", %+.0f %% against %s's "+format, 100*(w.v-r.v)/r.v, r.name, r.v)
	}
	return fmt.Sprintf("%s best on %s ("+format+"%s)", w.name, what, w.v, margin)
}

// sweepMarkdown is the side-by-side table and the verdicts.
func sweepMarkdown(res *sweepResult) string {
	var b strings.Builder
	b.WriteString("| layout (dp x tp) | sessions | output tok/min | TTFB p50 s | TTFB p95 s | prefix hit % | KV tokens per replica (total) | sessions that fit |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	f := func(p *float64, d int) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'f', d, 64)
	}
	for _, r := range res.Rows {
		if r.SkippedReason != "" {
			fmt.Fprintf(&b, "| %s | skipped: %s | | | | | | |\n", r.Layout, strings.ReplaceAll(r.SkippedReason, "|", "/"))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s | %s | %d (%d) | %d |\n", r.Layout, r.Sessions, r.OutputPerMin,
			f(r.TTFBP50, 2), f(r.TTFBP95, 2), f(r.PrefixHitPct, 1), r.KVPerReplica, r.KVTotal, r.SessionsFit)
	}
	if len(res.Verdicts) > 0 {
		b.WriteString("\n")
		for _, v := range res.Verdicts {
			b.WriteString("- " + v + "\n")
		}
	}
	return b.String()
}

// writeSweep writes sweep.md, sweep.csv, sweep.json and sweep.svg.
func writeSweep(out string, res *sweepResult) error {
	if err := os.WriteFile(filepath.Join(out, "sweep.md"), []byte(sweepMarkdown(res)), 0o644); err != nil {
		return err
	}
	var csv strings.Builder
	csv.WriteString("layout,dp,tp,sessions,output_tokens_per_min,ttfb_p50_s,ttfb_p95_s,prefix_hit_pct,kv_tokens_per_replica,kv_tokens_total,working_set_tokens,sessions_fit,errors,skipped\n")
	opt := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'f', -1, 64)
	}
	for _, r := range res.Rows {
		fmt.Fprintf(&csv, "%s,%d,%d,%d,%s,%s,%s,%s,%d,%d,%d,%d,%d,%q\n", r.Layout, r.DP, r.TP, r.Sessions,
			strconv.FormatFloat(r.OutputPerMin, 'f', -1, 64), opt(r.TTFBP50), opt(r.TTFBP95), opt(r.PrefixHitPct),
			r.KVPerReplica, r.KVTotal, r.WorkingSet, r.SessionsFit, r.Errors, r.SkippedReason)
	}
	if err := os.WriteFile(filepath.Join(out, "sweep.csv"), []byte(csv.String()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "sweep.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "sweep.svg"), []byte(sweepSVG(res)), 0o644)
}

// sweepSVG draws output tok/min per stage, one line per layout.
func sweepSVG(res *sweepResult) string {
	const w, h, left, right, top, bottom = 640.0, 360.0, 70.0, 130.0, 30.0, 50.0
	var stages []int
	byLayout := map[string][]sweepRow{}
	maxOut := 0.0
	for _, r := range res.Rows {
		if r.SkippedReason != "" {
			continue
		}
		if !slices.Contains(stages, r.Sessions) {
			stages = append(stages, r.Sessions)
		}
		byLayout[r.Layout] = append(byLayout[r.Layout], r)
		maxOut = max(maxOut, r.OutputPerMin)
	}
	slices.Sort(stages)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="18">output tok/min per stage, by layout (dp x tp)</text>`+"\n", left)
	if len(stages) == 0 || maxOut <= 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	x := func(n int) float64 {
		i := slices.Index(stages, n)
		if len(stages) == 1 {
			return left + (w-left-right)/2
		}
		return left + float64(i)*(w-left-right)/float64(len(stages)-1)
	}
	y := func(v float64) float64 { return top + (h-top-bottom)*(1-v/(maxOut*1.1)) }
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", left, top, left, h-bottom)
	for _, n := range stages {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%d</text>`+"\n", x(n), h-bottom+16, n)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">sessions</text>`+"\n", left+(w-left-right)/2, h-10)
	for i := 0; i <= 4; i++ {
		v := maxOut * 1.1 * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	for i, name := range res.Layouts {
		rs := byLayout[name]
		if len(rs) == 0 {
			continue
		}
		col := colors[i%len(colors)]
		var pts []string
		for _, r := range rs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.Sessions), y(r.OutputPerMin)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", w-right+10, top+16*float64(i+1), col, name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
