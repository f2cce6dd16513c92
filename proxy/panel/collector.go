package panel

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names the collector emits, one series per replica (label
// "replica" = rank; never a session id). Engine metrics mirror the
// engines' own /metrics; counters are deltas since warden start with
// engine restarts (counter resets) folded in by the proxy, so they never go
// down while the warden runs.
const (
	MetricReplicaUp          = "warden_replica_up"                               // gauge 1/0: routable now
	MetricReplicaRestarts    = "warden_replica_restarts_total"                   // counter: engine restarts
	MetricReplicaInFlight    = "warden_replica_in_flight_requests"               // gauge: proxied requests open now
	MetricSessionsActive     = "warden_sessions_active"                          // gauge: active sessions homed there
	MetricSessionsSeen       = "warden_sessions_seen_total"                      // counter, no labels
	MetricEngineRunning      = "warden_engine_requests_running"                  // gauge
	MetricEngineWaiting      = "warden_engine_requests_waiting"                  // gauge
	MetricEngineKVUsage      = "warden_engine_kv_cache_usage_ratio"              // gauge 0..1
	MetricEngineKVCapacity   = "warden_engine_kv_cache_capacity_tokens"          // gauge
	MetricEnginePrefixQuery  = "warden_engine_prefix_cache_queries_tokens_total" // counter
	MetricEnginePrefixHits   = "warden_engine_prefix_cache_hits_tokens_total"    // counter
	MetricEnginePreemptions  = "warden_engine_preemptions_total"                 // counter
	MetricEnginePromptTokens = "warden_engine_prompt_tokens_total"               // counter
	MetricEngineGenTokens    = "warden_engine_generation_tokens_total"           // counter
)

var replicaLabel = []string{"replica"}

// metricDesc pairs a descriptor with its value type and how to read it.
type metricDesc struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	val  func(Replica) float64
}

func gauge(name, help string, val func(Replica) float64) metricDesc {
	return metricDesc{prometheus.NewDesc(name, help, replicaLabel, nil), prometheus.GaugeValue, val}
}

func counter(name, help string, val func(Replica) float64) metricDesc {
	return metricDesc{prometheus.NewDesc(name, help, replicaLabel, nil), prometheus.CounterValue, val}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collector is the Prometheus view of Status; see NewCollector.
type collector struct {
	src     func() Status
	metrics []metricDesc
	seen    *prometheus.Desc // no labels
}

var _ prometheus.Collector = (*collector)(nil)

// NewCollector returns a collector that calls src at every scrape and
// emits const metrics per replica (the names are the Metric* constants):
// up, restarts, in-flight and active sessions, and the engines' own gauges
// and counters mirrored; plus sessions seen. Request and usage-token
// counters are not here: the proxy instruments them as vecs at request time
// (warden_requests_total, warden_*_tokens_total). src must be safe to call from the scrape goroutine.
// Register it once on the registry that main builds.
func NewCollector(src func() Status) prometheus.Collector {
	return &collector{src: src, metrics: replicaMetrics(),
		seen: prometheus.NewDesc(MetricSessionsSeen, "Distinct sessions seen since warden start.", nil, nil),
	}
}

// replicaMetrics lists the one-value-per-replica metrics.
func replicaMetrics() []metricDesc {
	return []metricDesc{
		gauge(MetricReplicaUp, "Whether the replica is routable now (1) or not (0).", func(r Replica) float64 { return b2f(r.Up) }),
		counter(MetricReplicaRestarts, "Engine restarts of the replica since warden start.", func(r Replica) float64 { return float64(r.Restarts) }),
		gauge(MetricReplicaInFlight, "Requests the warden has open to the replica now.", func(r Replica) float64 { return float64(r.InFlight) }),
		gauge(MetricSessionsActive, "Active (not expired) sessions whose home is the replica.", func(r Replica) float64 { return float64(r.ActiveSessions) }),
		gauge(MetricEngineRunning, "Requests the engine is running (vllm:num_requests_running).", func(r Replica) float64 { return r.Running }),
		gauge(MetricEngineWaiting, "Requests waiting in the engine (vllm:num_requests_waiting).", func(r Replica) float64 { return r.Waiting }),
		gauge(MetricEngineKVUsage, "Fraction of the engine's KV cache in use, 0..1 (vllm:kv_cache_usage_perc).", func(r Replica) float64 { return r.KVUsed }),
		gauge(MetricEngineKVCapacity, "KV cache capacity of the engine in tokens (num_gpu_blocks x block_size).", func(r Replica) float64 { return float64(r.KVCapacityTokens) }),
		counter(MetricEnginePrefixQuery, "Prompt tokens the engine looked up in its prefix cache since warden start.", func(r Replica) float64 { return r.PrefixQueries }),
		counter(MetricEnginePrefixHits, "Prompt tokens the engine found in its prefix cache since warden start.", func(r Replica) float64 { return r.PrefixHits }),
		counter(MetricEnginePreemptions, "Engine preemptions since warden start.", func(r Replica) float64 { return r.Preemptions }),
		counter(MetricEnginePromptTokens, "Prompt tokens the engine processed since warden start (vllm:prompt_tokens_total).", func(r Replica) float64 { return r.EnginePrompt }),
		counter(MetricEngineGenTokens, "Tokens the engine generated since warden start (vllm:generation_tokens_total).", func(r Replica) float64 { return r.EngineGenerated }),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
	ch <- c.seen
}

// Collect implements prometheus.Collector: one snapshot per scrape.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src()
	ch <- prometheus.MustNewConstMetric(c.seen, prometheus.CounterValue, float64(s.SessionsSeen))
	for _, r := range s.Replicas {
		rank := strconv.Itoa(r.Rank)
		for _, m := range c.metrics {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.val(r), rank)
		}
	}
}
