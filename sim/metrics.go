package sim

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics exports vLLM's metric names with labels model_name and engine="0"
// on its own registry. Gauges and counters come from the engine's last
// published Snapshot at scrape time; TTFT and request outcomes are
// instrumented directly.
type metrics struct {
	reg     *prometheus.Registry
	mu      sync.Mutex
	snap    Snapshot
	labels  prometheus.Labels
	ttft    prometheus.Histogram
	success *prometheus.CounterVec

	running, waiting, usage, queries, hits, preempt, prompt, gen, cacheInfo *prometheus.Desc
	cacheLabels                                                             prometheus.Labels
}

func newMetrics(model string, cacheLabels prometheus.Labels) *metrics {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	vl := []string{"model_name", "engine"}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, vl, nil) }
	m := &metrics{
		reg: prometheus.NewRegistry(), labels: labels,
		running: desc("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting: desc("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		usage:   desc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		queries: desc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:    desc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		preempt: desc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		prompt:  desc("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		gen:     desc("vllm:generation_tokens_total", "Number of generation tokens processed."),
	}
	m.cacheInfo = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", nil, cacheLabels)
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds (simulated).",
		ConstLabels: labels,
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
			2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
	})
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
	}, []string{"finished_reason"})
	m.reg.MustRegister(m, m.ttft, m.success)
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.running, m.waiting, m.usage, m.queries, m.hits, m.preempt, m.prompt, m.gen, m.cacheInfo} {
		ch <- d
	}
}

// Collect implements prometheus.Collector from the last snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	s := m.snap
	m.mu.Unlock()
	lv := []string{m.labels["model_name"], "0"}
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	c := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	g(m.running, float64(s.Running))
	g(m.waiting, float64(s.Waiting))
	g(m.usage, s.KVUsage)
	c(m.queries, s.Counters.PrefixQueries)
	c(m.hits, s.Counters.PrefixHits)
	c(m.preempt, s.Counters.Preemptions)
	c(m.prompt, s.Counters.PromptTokens)
	c(m.gen, s.Counters.GenerationTokens)
	ch <- prometheus.MustNewConstMetric(m.cacheInfo, prometheus.GaugeValue, 1)
}

func (m *metrics) snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap
}

func (m *metrics) publish(s Snapshot) {
	m.mu.Lock()
	m.snap = s
	m.mu.Unlock()
}

// cacheConfigLabels are the labels of vllm:cache_config_info.
func cacheConfigLabels(cfg Config, numBlocks int) prometheus.Labels {
	return prometheus.Labels{
		"block_size":             fmt.Sprint(cfg.BlockSize),
		"num_gpu_blocks":         fmt.Sprint(numBlocks),
		"num_cpu_blocks":         "0",
		"gpu_memory_utilization": fmt.Sprint(cfg.GPUMemUtil),
		"enable_prefix_caching":  "True",
		"cache_dtype":            "auto",
		"engine":                 "0",
	}
}
