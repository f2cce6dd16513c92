package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Sample
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
`, Sample{running: 5, waiting: 1, kvUsed: 0.25, queries: 1000, hits: 600, prompt: 1100, generated: 50,
			preemptions: 2, kvCapacity: 44000, hasQueries: true, hasHits: true, hasPrompt: true, hasGen: true, hasPreem: true}},
		{"older names: counters without _total, gpu_cache_usage_perc", `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries{model_name="m"} 10
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits{model_name="m"} 4
`, Sample{kvUsed: 0.5, queries: 10, hits: 4, hasQueries: true, hasHits: true}},
		{"nothing known", "# TYPE other gauge\nother 1\n", Sample{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(Sample{})); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Parse(strings.NewReader("garbage{{{ 1\n")); err == nil {
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
	var e Scraped
	e.Apply(Sample{queries: 500, hasQueries: true}, time.Now()) // warden start: a baseline
	e.Apply(Sample{queries: 1166, hasQueries: true, hits: 640, hasHits: true}, time.Now())
	if e.queries.total != 666 || e.hits.total != 640 {
		t.Errorf("queries %v hits %v, want 666 and 640 (hits first exported after the first scrape)",
			e.queries.total, e.hits.total)
	}
	var fresh Scraped
	fresh.Apply(Sample{hits: 640, hasHits: true}, time.Now())
	if fresh.hits.total != 0 {
		t.Errorf("the first scrape's reading counted as %v; it is the baseline", fresh.hits.total)
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2500"} 1
`)
	f.Add("vllm:prefix_cache_hits 5\nvllm:prefix_cache_queries 9\nvllm:gpu_cache_usage_perc 0.5\n")
	f.Add(`# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="-3"} 1
vllm:cache_config_info{block_size="99999999999",num_gpu_blocks="99999999999"} 1
`)
	f.Add("# TYPE x counter\nx_total NaN\nx_total +Inf\n")
	f.Add("{\"not\":\"metrics\"}")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		if s.kvCapacity < 0 {
			t.Fatalf("negative KV capacity %d", s.kvCapacity)
		}
		var e Scraped
		e.Apply(s, time.Unix(1_800_000_000, 0))
		e.Apply(s, time.Unix(1_800_000_000, 0))
	})
}
