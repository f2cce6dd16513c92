package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name string
		text string
		want engineSample
	}{
		{"vLLM 0.26 names, two engines summed", `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1100
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 50
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2750"} 1
`, engineSample{running: 5, waiting: 1, kvUsed: 0.25, queries: 1000, hits: 600, prompt: 1100, generated: 50,
			preemptions: 2, kvCapacity: 44000, hasQueries: true, hasHits: true, hasPrompt: true, hasGen: true, hasPreem: true}},
		{"older names: counters without _total, gpu_cache_usage_perc", `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries{model_name="m"} 10
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits{model_name="m"} 4
`, engineSample{kvUsed: 0.5, queries: 10, hits: 4, hasQueries: true, hasHits: true}},
		{"nothing known", "# TYPE other gauge\nother 1\n", engineSample{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMetrics(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(engineSample{})); diff != "" {
				t.Errorf("parseMetrics (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parseMetrics(strings.NewReader("garbage{{{ 1\n")); err == nil {
		t.Error("garbage parsed without an error")
	}
}

func TestCounterDeltasSurviveRestarts(t *testing.T) {
	var c counter
	for _, v := range []float64{100, 150, 170, 20, 50} { // engine restarted after 170
		c.observe(v)
	}
	if c.total != 70+20+30 {
		t.Errorf("total = %v, want 120 (baseline 100, reset handled)", c.total)
	}
	c.restarted() // NoteRestart: the next reading counts in full
	c.observe(60)
	if c.total != 180 {
		t.Errorf("after restart total = %v, want 180", c.total)
	}
}

func TestCounterBornAfterTheFirstScrapeCountsFromZero(t *testing.T) {
	var e engineState
	e.apply(engineSample{queries: 500, hasQueries: true}, time.Now()) // warden start: a baseline
	e.apply(engineSample{queries: 1166, hasQueries: true, hits: 640, hasHits: true}, time.Now())
	if e.queries.total != 666 || e.hits.total != 640 {
		t.Errorf("queries %v hits %v, want 666 and 640 (hits first exported after the first scrape)",
			e.queries.total, e.hits.total)
	}
	var fresh engineState
	fresh.apply(engineSample{hits: 640, hasHits: true}, time.Now())
	if fresh.hits.total != 0 {
		t.Errorf("the first scrape's reading counted as %v; it is the baseline", fresh.hits.total)
	}
}

func TestCheckScrapesAndMarksDown(t *testing.T) {
	e := newFakeEngine(t)
	p, _ := testProxy(t, Config{}, e)
	p.CheckNow(context.Background())
	e.metrics.Store(metricsText(2, 1, 0.4, 300, 200))
	p.CheckNow(context.Background())
	r := p.Status().Replicas[0]
	want := struct{ Running, Waiting, KV, Q, H float64 }{2, 1, 0.4, 200, 150}
	got := struct{ Running, Waiting, KV, Q, H float64 }{r.Running, r.Waiting, r.KVUsed, r.PrefixQueries, r.PrefixHits}
	if diff := cmp.Diff(want, got); diff != "" || r.KVCapacityTokens != 40000 || r.HitRate != 0.75 {
		t.Errorf("scraped (-want +got):\n%s capacity %d hit rate %v", diff, r.KVCapacityTokens, r.HitRate)
	}
	e.srv.Close()
	for range healthFailsDown - 1 {
		p.CheckNow(context.Background())
	}
	if !p.Status().Replicas[0].Up {
		t.Error("down before the failure limit")
	}
	p.CheckNow(context.Background())
	if r := p.Status().Replicas[0]; r.Up || r.ScrapeError == "" {
		t.Errorf("still up after %d failed checks (error %q)", healthFailsDown, r.ScrapeError)
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	e := newFakeEngine(t)
	p, _ := testProxy(t, Config{ScrapeInterval: time.Millisecond}, e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	simproc.Poll(t, "a scrape", func() bool { return !p.Status().Replicas[0].ScrapedAt.IsZero() })
	cancel()
	<-done
}
