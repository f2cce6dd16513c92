package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lmwarden/warden/internal/exit"
)

// Main is `warden bench`: it runs the stages until they are done or
// SIGINT/SIGTERM, writes the results to the folder (and joins the decision
// log), prints the table on stdout and logs on stderr. The error carries the
// exit status: 2 for bad options, 130 when interrupted, 1 when a stage lost
// more than MaxFailed of its turns.
func Main(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	cfg, err := o.Config()
	if err != nil {
		return exit.New(2, err.Error())
	}
	level := slog.LevelInfo
	if o.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &Runner{Cfg: cfg, Log: log, Stderr: stderr}
	res, runErr := r.Run(ctx, o.ABSet)
	if res == nil {
		return runErr
	}
	if err := WriteAll(cfg.Out, res); err != nil {
		return errors.Join(runErr, fmt.Errorf("writing results: %w", err))
	}
	if cfg.DecisionLog != "" {
		if n, err := JoinDecisions(cfg.Out, cfg.DecisionLog, res, 3*time.Second); err != nil {
			log.Error("the decision log was not joined", "path", cfg.DecisionLog, "err", err)
		} else {
			log.Info("decision log joined", "file", FileTurnDecisions, "turns", len(res.Turns), "logged", n)
		}
	}
	fmt.Fprint(stdout, Markdown(res))
	for _, s := range res.Stages {
		if s.Errors > 0 {
			log.Warn("turns failed", "variant", s.Variant, "sessions", s.Sessions, "errors", s.Errors)
		}
		if s.Canceled > 0 {
			log.Info("turns canceled by the bench (interrupted, or still running when the stage's drain ended)",
				"variant", s.Variant, "sessions", s.Sessions, "canceled", s.Canceled)
		}
		if s.LagWarning != "" {
			log.Warn(s.LagWarning, "variant", s.Variant, "sessions", s.Sessions,
				"ttfb_p95_s", *s.TTFBP95, "bench_lag_p99_s", *s.BenchLagP99)
		}
	}
	log.Info("results written", "dir", cfg.Out)
	if errors.Is(runErr, context.Canceled) {
		return exit.New(130, "bench interrupted; partial results written to "+cfg.Out)
	}
	if runErr != nil {
		return runErr
	}
	if err := res.Failed(o.MaxFailed); err != nil {
		return exit.New(1, "warden bench: "+err.Error()+" (results in "+cfg.Out+")")
	}
	return nil
}
