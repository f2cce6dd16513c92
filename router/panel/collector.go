package panel

import (
	"github.com/lmwarden/warden/router/schema"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	mn "github.com/lmwarden/warden/router/metricname"
)

// Metric names the collector emits, one series per replica (label
// "replica" = rank; never a session id), besides the engine mirrors
// (router/metricname's Engine*: the engines' own /metrics as deltas since
// warden start with engine restarts folded in by the core, so they never
// go down while the warden runs).
const (
	MetricReplicaUp       = "warden_replica_up"                 // gauge 1/0: routable now
	MetricReplicaRestarts = "warden_replica_restarts_total"     // counter: engine restarts
	MetricReplicaInFlight = "warden_replica_in_flight_requests" // gauge: proxied requests open now
	MetricSessionsActive  = "warden_sessions_active"            // gauge: active sessions homed there
	MetricSessionsSeen    = "warden_sessions_seen_total"        // counter, no labels
	MetricReplicaErrors   = "warden_replica_errors_total"       // counter: answers of 5xx or transport errors
	MetricKVEventsLive    = "warden_kv_events_live"             // gauge 1/0: the ledger is read for it
	MetricLedgerBlocks    = "warden_ledger_blocks"              // gauge: blocks its engine holds (events)
)

var replicaLabel = []string{"replica"}

// metricDesc pairs a descriptor with its value type and how to read it.
type metricDesc struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	val  func(schema.Replica) float64
}

func gauge(name, help string, val func(schema.Replica) float64) metricDesc {
	return metricDesc{prometheus.NewDesc(name, help, replicaLabel, nil), prometheus.GaugeValue, val}
}

func counter(name, help string, val func(schema.Replica) float64) metricDesc {
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
	src     func() schema.Status
	metrics []metricDesc
	seen    *prometheus.Desc // no labels
}

var _ prometheus.Collector = (*collector)(nil)

// NewCollector returns a collector that calls src at every scrape and
// emits const metrics per replica (the names are the Metric* constants and
// metricname's Engine*): up, restarts, in-flight and active sessions, and
// the engines' own gauges and counters mirrored; plus sessions seen. Request and usage-token
// counters are not here: the core instruments them as vecs at request time
// (warden_requests_total, warden_*_tokens_total). src must be safe to call from the scrape goroutine.
// Register it once on the registry that main builds.
func NewCollector(src func() schema.Status) prometheus.Collector {
	return &collector{src: src, metrics: replicaMetrics(),
		seen: prometheus.NewDesc(MetricSessionsSeen, "Distinct sessions seen since warden start.", nil, nil),
	}
}

// replicaMetrics lists the one-value-per-replica metrics.
func replicaMetrics() []metricDesc {
	return []metricDesc{
		gauge(MetricReplicaUp, "Whether the replica is routable now (1) or not (0).", func(r schema.Replica) float64 { return b2f(r.Up) }),
		counter(MetricReplicaRestarts, "Engine restarts of the replica since warden start.", func(r schema.Replica) float64 { return float64(r.Restarts) }),
		counter(MetricReplicaErrors, "Requests the replica answered with a server error (5xx, or a stream broken off) since warden start; the client saw the failure.", func(r schema.Replica) float64 { return float64(r.Errors) }),
		gauge(MetricReplicaInFlight, "Requests the warden has open to the replica now.", func(r schema.Replica) float64 { return float64(r.InFlight) }),
		gauge(MetricSessionsActive, "Active (not expired) sessions whose home is the replica.", func(r schema.Replica) float64 { return float64(r.ActiveSessions) }),
		gauge(mn.EngineRunning, "Requests the engine is running (vllm:num_requests_running).", func(r schema.Replica) float64 { return r.Running }),
		gauge(mn.EngineWaiting, "Requests waiting in the engine (vllm:num_requests_waiting).", func(r schema.Replica) float64 { return r.Waiting }),
		gauge(mn.EngineKVUsage, "Fraction of the engine's KV cache in use, 0..1 (vllm:kv_cache_usage_perc).", func(r schema.Replica) float64 { return r.KVUsed }),
		gauge(mn.EngineKVCapacity, "KV cache capacity of the engine in tokens (num_gpu_blocks x block_size).", func(r schema.Replica) float64 { return float64(r.KVCapacityTokens) }),
		counter(mn.EnginePrefixQuery, "Prompt tokens the engine looked up in its prefix cache since warden start.", func(r schema.Replica) float64 { return r.PrefixQueries }),
		counter(mn.EnginePrefixHits, "Prompt tokens the engine found in its prefix cache since warden start.", func(r schema.Replica) float64 { return r.PrefixHits }),
		counter(mn.EnginePreemptions, "Engine preemptions since warden start.", func(r schema.Replica) float64 { return r.Preemptions }),
		counter(mn.EnginePromptTokens, "Prompt tokens the engine processed since warden start (vllm:prompt_tokens_total).", func(r schema.Replica) float64 { return r.EnginePrompt }),
		counter(mn.EngineGenTokens, "Tokens the engine generated since warden start (vllm:generation_tokens_total).", func(r schema.Replica) float64 { return r.EngineGenerated }),
		gauge(MetricKVEventsLive, "Whether the replica's KV-cache events flow and placement reads its ledger (1) or the estimate (0).", func(r schema.Replica) float64 { return b2f(r.KVEvents == "live") }),
		gauge(MetricLedgerBlocks, "KV blocks the ledger knows the replica's engine holds (all tiers), from its KV-cache events.", func(r schema.Replica) float64 { return float64(r.LedgerBlocks) }),
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
