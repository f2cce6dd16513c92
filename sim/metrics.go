package sim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/lmwarden/warden/sim/model"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics exports vLLM's metric names with labels model_name and engine
// (the data-parallel rank: "0" alone without --data-parallel-size, as
// vLLM's) on its own registry. Gauges and counters come from each engine's
// last published Snapshot at scrape time; TTFT and request outcomes are
// instrumented directly.
type metrics struct {
	reg     *prometheus.Registry
	mu      sync.Mutex
	snaps   []model.Snapshot // one per engine
	name    string           // model_name
	ttft    []prometheus.Observer
	success *prometheus.CounterVec // labels engine, finished_reason

	running, waiting, usage, queries, hits, preempt, prompt, gen *prometheus.Desc
	cacheInfo                                                    []*prometheus.Desc // one per engine: its labels carry engine="i"
	host                                                         *hostDescs         // nil without the host tier

	// timeScale is --sim-time-scale, exported as MetricTimeScale so a
	// client (warden bench) can read times in the engine's clock.
	timeScale prometheus.Gauge
}

// hostDescs are the metrics vLLM 0.32.0 exports with its native KV
// offloading (docs/kv-offload.md): the connector's prefix-cache counters
// (v1/metrics/loggers.py), hits by tier, the offloading connector's
// transfer counters (distributed/kv_transfer/kv_connector/v1/offloading/
// metrics.py, also under their deprecated transfer_type names) and the CPU
// cache gauge (v1/kv_offload/cpu/spec.py), and the async-load stages of
// waiting requests.
type hostDescs struct {
	extQueries, extHits, bySource, loadBytes, loadTime, storeBytes, storeTime, allocFail, cpuUsage, totalBytes, totalTime, fetch *prometheus.Desc
}

// enableHost adds the host tier's metrics.
func (m *metrics) enableHost() {
	vl := []string{"model_name", "engine"}
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(vl, extra...), nil)
	}
	m.host = &hostDescs{
		extQueries: desc("vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens."),
		extHits:    desc("vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens."),
		bySource:   desc("vllm:prompt_tokens_cached_by_source_total", "Prefix-cache hit tokens by the cache tier that supplied them.", "source"),
		loadBytes:  desc("vllm:kv_offload_load_bytes_total", "Total bytes loaded from offload storage to GPU."),
		loadTime:   desc("vllm:kv_offload_load_time_total", "Total load time from offload storage to GPU, in seconds."),
		storeBytes: desc("vllm:kv_offload_store_bytes_total", "Total bytes stored from GPU to offload storage."),
		storeTime:  desc("vllm:kv_offload_store_time_total", "Total store time from GPU to offload storage, in seconds."),
		allocFail:  desc("vllm:kv_offload_allocation_failure_total", "Number of KV offload store allocation attempts that failed."),
		cpuUsage:   desc("vllm:kv_offload_cpu_cache_usage_perc", "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated)."),
		totalBytes: desc("vllm:kv_offload_total_bytes_total", "Number of bytes offloaded by KV connector (deprecated).", "transfer_type"),
		totalTime:  desc("vllm:kv_offload_total_time_total", "Total time measured by all KV offloading operations (deprecated).", "transfer_type"),
		fetch:      desc("vllm:num_requests_kv_fetch_by_stage", "Number of waiting requests by async KV load stage.", "stage"),
	}
}

// MetricTimeScale is the simulator's own gauge (not vLLM's): its
// --sim-time-scale, simulated seconds per wall second.
const MetricTimeScale = "warden_sim_time_scale"

// newMetrics exports one engine per element of cacheLabels (its
// vllm:cache_config_info labels, engine="i" among them).
func newMetrics(name string, timeScale float64, cacheLabels []prometheus.Labels) *metrics {
	labels := prometheus.Labels{"model_name": name}
	vl := []string{"model_name", "engine"}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, vl, nil) }
	m := &metrics{
		reg: prometheus.NewRegistry(), name: name, snaps: make([]model.Snapshot, len(cacheLabels)),
		running: desc("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting: desc("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		usage:   desc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		queries: desc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:    desc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		preempt: desc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		prompt:  desc("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		gen:     desc("vllm:generation_tokens_total", "Number of generation tokens processed."),
	}
	for _, l := range cacheLabels {
		m.cacheInfo = append(m.cacheInfo, prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", nil, l))
	}
	ttft := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds (simulated).",
		ConstLabels: labels,
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
			2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
	}, []string{"engine"})
	for i := range cacheLabels {
		m.ttft = append(m.ttft, ttft.WithLabelValues(strconv.Itoa(i)))
	}
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
	}, []string{"engine", "finished_reason"})
	m.timeScale = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricTimeScale, Help: "Simulated seconds per wall second (--sim-time-scale): times the simulator reports are in its simulated clock.",
	})
	m.timeScale.Set(timeScale)
	m.reg.MustRegister(m, ttft, m.success, m.timeScale)
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append([]*prometheus.Desc{m.running, m.waiting, m.usage, m.queries, m.hits, m.preempt, m.prompt, m.gen}, m.cacheInfo...) {
		ch <- d
	}
	if h := m.host; h != nil {
		for _, d := range []*prometheus.Desc{h.extQueries, h.extHits, h.bySource, h.loadBytes, h.loadTime, h.storeBytes,
			h.storeTime, h.allocFail, h.cpuUsage, h.totalBytes, h.totalTime, h.fetch} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector from each engine's last snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	snaps := append([]model.Snapshot(nil), m.snaps...)
	m.mu.Unlock()
	for i, s := range snaps {
		m.collect(ch, i, s)
	}
}

// collect sends engine i's series.
func (m *metrics) collect(ch chan<- prometheus.Metric, i int, s model.Snapshot) {
	lv := []string{m.name, strconv.Itoa(i)}
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
	ch <- prometheus.MustNewConstMetric(m.cacheInfo[i], prometheus.GaugeValue, 1)
	if h := m.host; h != nil {
		f := func(d *prometheus.Desc, t prometheus.ValueType, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, t, v, append(lv[:2:2], extra...)...)
		}
		k := s.Counters
		f(h.extQueries, prometheus.CounterValue, float64(k.ExternalQueries))
		f(h.extHits, prometheus.CounterValue, float64(k.ExternalHits))
		// vLLM pre-creates every CacheHitSource; the GPU's hits are "device",
		// the tier's "host" (v1/metrics/cache_hit_source.py).
		for _, src := range []struct {
			name string
			v    int64
		}{{"device", k.PrefixHits}, {"host", k.ExternalHits}, {"p2p", 0}, {"disk", 0}, {"external_unspecified", 0}} {
			f(h.bySource, prometheus.CounterValue, float64(src.v), src.name)
		}
		f(h.loadBytes, prometheus.CounterValue, float64(k.HostLoadBytes))
		f(h.loadTime, prometheus.CounterValue, k.HostLoadSeconds)
		f(h.storeBytes, prometheus.CounterValue, float64(k.HostStoreBytes))
		f(h.storeTime, prometheus.CounterValue, k.HostStoreSeconds)
		f(h.allocFail, prometheus.CounterValue, float64(k.HostAllocFailures))
		f(h.cpuUsage, prometheus.GaugeValue, s.Host.UsagePerc)
		f(h.totalBytes, prometheus.CounterValue, float64(k.HostLoadBytes), "CPU_to_GPU")
		f(h.totalBytes, prometheus.CounterValue, float64(k.HostStoreBytes), "GPU_to_CPU")
		f(h.totalTime, prometheus.CounterValue, k.HostLoadSeconds, "CPU_to_GPU")
		f(h.totalTime, prometheus.CounterValue, k.HostStoreSeconds, "GPU_to_CPU")
		f(h.fetch, prometheus.GaugeValue, 0, "waiting_to_start")
		f(h.fetch, prometheus.GaugeValue, float64(s.Host.FetchRunning), "in_progress")
		f(h.fetch, prometheus.GaugeValue, float64(s.Host.FetchCompleted), "completed_waiting")
	}
}

// snapshot is engine i's last published snapshot.
func (m *metrics) snapshot(i int) model.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snaps[i]
}

// publish records engine i's snapshot s.
func (m *metrics) publish(i int, s model.Snapshot) {
	m.mu.Lock()
	m.snaps[i] = s
	m.mu.Unlock()
}

// cacheConfigLabels are the labels of vllm:cache_config_info.
// With the host tier they also carry its two CacheConfig fields, as vLLM's
// (metrics_info exports every field; without the tier vLLM says
// kv_offloading_size "None", which the sim leaves out to keep its output
// as before).
func cacheConfigLabels(cfg Config, numBlocks, engine int) prometheus.Labels {
	l := cacheConfigLabelsBase(cfg, numBlocks)
	l["engine"] = strconv.Itoa(engine)
	if cfg.KVOffloadGiB > 0 {
		l["kv_offloading_backend"] = cfg.KVOffloadBackend
		l["kv_offloading_size"] = pyFloat(cfg.KVOffloadGiB)
	}
	return l
}

// pyFloat formats f as Python's str(float) does for ordinary values
// (16.0, 0.5).
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

func cacheConfigLabelsBase(cfg Config, numBlocks int) prometheus.Labels {
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
