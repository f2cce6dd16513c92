package bench

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
)

// TestABAgainstWardenOverSimulators runs the A/B driver against the real
// proxy in front of two simulator processes.
func TestABAgainstWardenOverSimulators(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulator processes")
	}
	t.Setenv("VLLM_SERVER_DEV_MODE", "1") // the engines serve /reset_prefix_cache, as vLLM in dev mode
	var backends []router.Backend
	for i := 0; i < 2; i++ {
		p := simproc.Start(t, "--sim-time-scale", "20", "--max-num-seqs", "32", "--stream-interval", "4")
		backends = append(backends, router.Backend{Rank: i, URL: p.URL, MaxNumSeqs: 32})
	}
	core, err := router.New(router.Config{Policy: "sticky", ScrapeInterval: 50 * time.Millisecond, Seed: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, backends)
	if err != nil {
		t.Fatal(err)
	}
	w, err := proxy.New(core, proxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core.CheckNow(ctx)
	go core.Run(ctx)
	front := httptest.NewServer(w.Handler())
	defer front.Close()

	cfg := simConfig(front.URL, APIAnthropic)
	cfg.Stages = []int{2, 4}
	cfg.Turns = 2
	cfg.Variants = []string{"off", "sticky"}
	cfg.ResetCache = true
	cfg.Poll = 2 * time.Second
	res := runBench(t, cfg, true)
	t.Log("\n" + Markdown(res))

	if res.Target != "warden" || len(res.Stages) != 4 {
		t.Fatalf("target %s with %d stage runs, want warden and 4", res.Target, len(res.Stages))
	}
	for _, s := range res.Stages {
		if s.Turns == 0 || s.Errors != 0 {
			t.Errorf("%s/%d: %d turns, %d errors", s.Variant, s.Sessions, s.Turns, s.Errors)
		}
		if s.PrefixHitPct == nil || s.ReplicasBusy == nil || *s.ReplicasBusy > 2 || s.StayedPct == nil {
			t.Errorf("%s/%d: hit %v busy %v stayed %v, want all known", s.Variant, s.Sessions, s.PrefixHitPct, s.ReplicasBusy, s.StayedPct)
			continue
		}
		if s.Variant == "sticky" && *s.StayedPct != 100 {
			t.Errorf("sticky/%d: stayed %.1f%%, want 100 (no spill below 8 in flight)", s.Sessions, *s.StayedPct)
		}
	}
	if got := core.Status().Policy; got != "sticky" {
		t.Errorf("policy after the run = %q, want the original sticky restored", got)
	}
}
