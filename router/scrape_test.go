package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/engine"
)

func TestCheckScrapesAndMarksDown(t *testing.T) {
	e := newFakeEngine(t)
	p, _ := testProxy(t, testConfig{}, e)
	coreOf(p).CheckNow(context.Background())
	e.metrics.Store(metricsText(2, 1, 0.4, 300, 200))
	coreOf(p).CheckNow(context.Background())
	r := coreOf(p).Status().Replicas[0]
	want := struct{ Running, Waiting, KV, Q, H float64 }{2, 1, 0.4, 200, 150}
	got := struct{ Running, Waiting, KV, Q, H float64 }{r.Running, r.Waiting, r.KVUsed, r.PrefixQueries, r.PrefixHits}
	if diff := cmp.Diff(want, got); diff != "" || r.KVCapacityTokens != 40000 || r.HitRate != 0.75 {
		t.Errorf("scraped (-want +got):\n%s capacity %d hit rate %v", diff, r.KVCapacityTokens, r.HitRate)
	}
	e.srv.Close()
	for range engine.CheckFailsDown - 1 {
		coreOf(p).CheckNow(context.Background())
	}
	if !coreOf(p).Status().Replicas[0].Up {
		t.Error("down before the failure limit")
	}
	coreOf(p).CheckNow(context.Background())
	if r := coreOf(p).Status().Replicas[0]; r.Up || r.ScrapeError == "" {
		t.Errorf("still up after %d failed checks (error %q)", engine.CheckFailsDown, r.ScrapeError)
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	e := newFakeEngine(t)
	p, _ := testProxy(t, testConfig{Config: router.Config{ScrapeInterval: time.Millisecond}}, e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { coreOf(p).Run(ctx); close(done) }()
	simproc.Poll(t, "a scrape", func() bool { return !coreOf(p).Status().Replicas[0].ScrapedAt.IsZero() })
	cancel()
	<-done
}
