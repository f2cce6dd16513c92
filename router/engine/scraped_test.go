package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
`, Sample{running: 5, hasRunning: true, waiting: 1, kvUsed: 0.25, queries: 1000, hits: 600, prompt: 1100, generated: 50,
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
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(Sample{}), cmpopts.IgnoreFields(Sample{}, "engines")); diff != "" {
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

// vllm032Tier is what vLLM 0.32.0 exports for a host KV tier of 64 GiB
// (--kv-offloading-backend native --kv-offloading-size 64): the metric
// names, labels and the _total/_created samples prometheus_client writes.
const vllm032Tier = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 10000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 6000.0
# HELP vllm:external_prefix_cache_queries_total External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 4000.0
# HELP vllm:external_prefix_cache_queries_created External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.
# TYPE vllm:external_prefix_cache_queries_created gauge
vllm:external_prefix_cache_queries_created{engine="0",model_name="m"} 1.7645e+09
# HELP vllm:external_prefix_cache_hits_total External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 2500.0
# HELP vllm:prompt_tokens_cached_by_source_total Prefix-cache hit tokens by the cache tier that supplied them.
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 6000.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 2500.0
# HELP vllm:kv_offload_load_bytes_total Total bytes loaded from offload storage to GPU.
# TYPE vllm:kv_offload_load_bytes_total counter
vllm:kv_offload_load_bytes_total{engine="0",model_name="m"} 1.6384e+08
# HELP vllm:kv_offload_store_bytes_total Total bytes stored from GPU to offload storage.
# TYPE vllm:kv_offload_store_bytes_total counter
vllm:kv_offload_store_bytes_total{engine="0",model_name="m"} 6.5536e+08
# HELP vllm:kv_offload_total_bytes_total Number of bytes offloaded by KV connector
# TYPE vllm:kv_offload_total_bytes_total counter
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="CPU_to_GPU"} 1.6384e+08
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 6.5536e+08
# HELP vllm:kv_offload_cpu_cache_usage_perc Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated).
# TYPE vllm:kv_offload_cpu_cache_usage_perc gauge
vllm:kv_offload_cpu_cache_usage_perc{engine="0",model_name="m"} 0.01
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",kv_offloading_backend="native",kv_offloading_size="64.0",num_cpu_blocks="None",num_gpu_blocks="2750"} 1.0
`

func TestParseHostKVTier(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Sample
	}{
		{"vLLM 0.32 native tier", vllm032Tier, Sample{running: 2, hasRunning: true, queries: 10000, hits: 6000, kvCapacity: 44000,
			hasQueries: true, hasHits: true,
			offload: Offload{Backend: "native", Bytes: 64 << 30}, offQueries: 4000, offHits: 2500,
			offLoaded: 163840000, offStored: 655360000, hasOffQ: true, hasOffH: true, hasOffL: true, hasOffSt: true}},
		{"older: the transfer bytes only under the deprecated name", `# TYPE vllm:kv_offload_total_bytes_total counter
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="CPU_to_GPU"} 100
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 300
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_offloading_size="2.5",num_gpu_blocks="10"} 1
`, Sample{kvCapacity: 160, offload: Offload{Backend: "native", Bytes: 2<<30 + 512<<20},
			offLoaded: 100, offStored: 300, hasOffL: true, hasOffSt: true}},
		{"no tier: size None, the connector counters at 0", `# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 0.0
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 0.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_offloading_backend="native",kv_offloading_size="None",num_gpu_blocks="10"} 1
`, Sample{kvCapacity: 160, hasOffQ: true, hasOffH: true}},
		{"the transfer counters without the tier's labels: a native tier of unknown size", `# TYPE vllm:kv_offload_load_bytes_total counter
# TYPE vllm:kv_offload_store_bytes_total counter
vllm:kv_offload_store_bytes_total{engine="0",model_name="m"} 4096
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="10"} 1
`, Sample{kvCapacity: 160, offload: Offload{Backend: "native"}, offStored: 4096, hasOffSt: true}}, // a family without samples is absent
		{"LMCache: on, its size its server's", `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_offloading_backend="lmcache",kv_offloading_size="100.0",num_gpu_blocks="10"} 1
`, Sample{kvCapacity: 160, offload: Offload{Backend: "lmcache"}}},
		{"two engines summed", `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_offloading_backend="native",kv_offloading_size="8.0",num_gpu_blocks="10"} 1
vllm:cache_config_info{block_size="16",engine="1",kv_offloading_backend="native",kv_offloading_size="8.0",num_gpu_blocks="10"} 1
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 5
vllm:external_prefix_cache_hits_total{engine="1",model_name="m"} 7
`, Sample{kvCapacity: 320, offload: Offload{Backend: "native", Bytes: 16 << 30}, offHits: 12, hasOffH: true}},
		{"nonsense sizes are ignored", `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{engine="0",kv_offloading_size="NaN"} 1
vllm:cache_config_info{engine="1",kv_offloading_size="-4"} 1
vllm:cache_config_info{engine="2",kv_offloading_size="1e300"} 1
`, Sample{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(Sample{}), cmpopts.IgnoreFields(Sample{}, "engines")); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostKVTierCountersSinceStart(t *testing.T) {
	parse := func(q, h, loaded float64) Sample {
		t.Helper()
		s, err := Parse(strings.NewReader(fmt.Sprintf(`# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{engine="0"} %v
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0"} %v
# TYPE vllm:kv_offload_load_bytes_total counter
vllm:kv_offload_load_bytes_total{engine="0"} %v
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_offloading_backend="native",kv_offloading_size="4.0",num_gpu_blocks="10"} 1
`, q, h, loaded)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var e Scraped
	at := time.Unix(1_800_000_000, 0)
	e.Apply(parse(1000, 400, 1e6), at) // warden start: a baseline
	e.Apply(parse(1600, 700, 3e6), at)
	st := e.Stats()
	if st.Offload != (Offload{Backend: "native", Bytes: 4 << 30}) || st.OffloadQueries != 600 || st.OffloadHits != 300 ||
		st.OffloadLoadedBytes != 2e6 {
		t.Errorf("stats %+v", st)
	}
	if !e.Apply(parse(100, 50, 0), at) { // went down: the engine restarted
		t.Error("a host-tier counter going down is not reported as a reset")
	}
	if st = e.Stats(); st.OffloadQueries != 700 || st.OffloadHits != 350 {
		t.Errorf("after the reset: queries %v hits %v, want 700 and 350", st.OffloadQueries, st.OffloadHits)
	}
	e.Apply(Sample{}, at) // a scrape without the tier's labels keeps the configuration
	if e.Stats().Offload.Bytes != 4<<30 {
		t.Error("the tier's size was forgotten")
	}
}

func TestHostKVTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Stats
		want int
	}{
		{"no tier", Stats{}, 0},
		{"a tier, no hit yet: size in tokens unknown", Stats{Offload: Offload{Backend: "native", Bytes: 16 << 30}}, -1},
		{"lmcache sizes itself", Stats{Offload: Offload{Backend: "lmcache"}, OffloadHits: 100, OffloadLoadedBytes: 100 * 147456}, -1},
		// Qwen3-4B: 147,456 bytes a token; 16 GiB hold 116,508 tokens.
		{"bytes per token measured from the loads", Stats{Offload: Offload{Backend: "native", Bytes: 16 << 30},
			OffloadHits: 10000, OffloadLoadedBytes: 10000 * 147456}, 116508},
	} {
		if got := tc.s.HostKVTokens(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestOffloadFilled: the tier's fill is the bytes the engine stored since
// it started over the tier's size (vLLM exports no occupancy), capped at
// full, counted afresh after a restart, unknown without a store counter.
func TestOffloadFilled(t *testing.T) {
	parse := func(stored string) Sample {
		t.Helper()
		text := `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_offloading_backend="native",kv_offloading_size="4.0",num_gpu_blocks="10"} 1
`
		if stored != "" {
			text += "# TYPE vllm:kv_offload_store_bytes_total counter\nvllm:kv_offload_store_bytes_total{engine=\"0\"} " + stored + "\n"
		}
		s, err := Parse(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var e Scraped
	at := time.Unix(1_800_000_000, 0)
	e.Apply(parse(""), at)
	if f := e.Stats().OffloadFilled(); f != -1 {
		t.Errorf("no store counter: filled %v, want unknown", f)
	}
	e.Apply(parse(fmt.Sprint(1<<30)), at) // 1 of 4 GiB, counted since the engine started (not since the warden did)
	if f := e.Stats().OffloadFilled(); f != 0.25 {
		t.Errorf("1 GiB stored of 4: filled %v", f)
	}
	e.Apply(parse(fmt.Sprint(9<<30)), at) // more than its size: it is full and evicting
	if f := e.Stats().OffloadFilled(); f != 1 {
		t.Errorf("9 GiB stored into 4: filled %v, want 1", f)
	}
	e.Restarted()
	e.Apply(parse(fmt.Sprint(2<<30)), at) // a new engine, an empty tier
	if f := e.Stats().OffloadFilled(); f != 0.5 {
		t.Errorf("after a restart, 2 GiB stored: filled %v", f)
	}
}

// A vLLM server run with --data-parallel-size 2 exports every series once
// per engine (as vLLM 0.32's CPU build does): the sample sums them, and
// Engine gives each rank's own.
func TestParseDataParallelEngines(t *testing.T) {
	const text = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 0.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 26.0
vllm:prompt_tokens_total{engine="1",model_name="tiny"} 52.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="100"} 1.0
vllm:cache_config_info{block_size="32",engine="1",num_gpu_blocks="100"} 1.0
# TYPE warden_sim_time_scale gauge
warden_sim_time_scale 5
`
	s, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Engines(); !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("Engines = %q, want [0 1]", got)
	}
	if s.running != 4 || s.prompt != 78 || s.kvCapacity != 6400 {
		t.Errorf("summed: running %v prompt %v capacity %d, want 4, 78, 6400", s.running, s.prompt, s.kvCapacity)
	}
	for id, want := range map[string]struct{ running, waiting, prompt float64 }{"0": {3, 2, 26}, "1": {1, 0, 52}} {
		e, ok := s.Engine(id)
		if !ok {
			t.Fatalf("no engine %s", id)
		}
		if e.running != want.running || e.waiting != want.waiting || e.prompt != want.prompt || e.kvCapacity != 3200 {
			t.Errorf("engine %s: running %v waiting %v prompt %v capacity %d, want %v, %v, %v, 3200",
				id, e.running, e.waiting, e.prompt, e.kvCapacity, want.running, want.waiting, want.prompt)
		}
		if e.timeScale != 5 { // a series without the engine label belongs to every engine
			t.Errorf("engine %s: time scale %v, want the unlabelled 5", id, e.timeScale)
		}
	}
	if _, ok := s.Engine("2"); ok {
		t.Error("Engine(2) found on a server with engines 0 and 1")
	}
}
