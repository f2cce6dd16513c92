package panel

import (
	"github.com/lmwarden/warden/router/schema"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	mn "github.com/lmwarden/warden/router/metricname"
)

func TestCollectorPedanticAndLint(t *testing.T) {
	s := sampleStatus(3)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(func() schema.Status { return s }))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 17 {
		t.Errorf("%d metric families, want 17", len(mfs))
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "replica" {
					t.Errorf("%s has label %q", mf.GetName(), l.GetName())
				}
			}
		}
	}
}

// TestCollectorValues checks each emitted value against the Status, with
// the expected exposition written by hand from sampleStatus.
func TestCollectorValues(t *testing.T) {
	s := sampleStatus(3)
	c := NewCollector(func() schema.Status { return s })
	want := `
# HELP warden_replica_up Whether the replica is routable now (1) or not (0).
# TYPE warden_replica_up gauge
warden_replica_up{replica="0"} 1
warden_replica_up{replica="1"} 1
warden_replica_up{replica="2"} 0
# HELP warden_replica_restarts_total Engine restarts of the replica since warden start.
# TYPE warden_replica_restarts_total counter
warden_replica_restarts_total{replica="0"} 0
warden_replica_restarts_total{replica="1"} 1
warden_replica_restarts_total{replica="2"} 0
# HELP warden_replica_in_flight_requests Requests the warden has open to the replica now.
# TYPE warden_replica_in_flight_requests gauge
warden_replica_in_flight_requests{replica="0"} 3
warden_replica_in_flight_requests{replica="1"} 4
warden_replica_in_flight_requests{replica="2"} 5
# HELP warden_sessions_active Active (not expired) sessions whose home is the replica.
# TYPE warden_sessions_active gauge
warden_sessions_active{replica="0"} 2
warden_sessions_active{replica="1"} 3
warden_sessions_active{replica="2"} 4
# HELP warden_engine_requests_running Requests the engine is running (vllm:num_requests_running).
# TYPE warden_engine_requests_running gauge
warden_engine_requests_running{replica="0"} 3
warden_engine_requests_running{replica="1"} 4
warden_engine_requests_running{replica="2"} 5
# HELP warden_engine_requests_waiting Requests waiting in the engine (vllm:num_requests_waiting).
# TYPE warden_engine_requests_waiting gauge
warden_engine_requests_waiting{replica="0"} 0
warden_engine_requests_waiting{replica="1"} 1
warden_engine_requests_waiting{replica="2"} 2
# HELP warden_engine_kv_cache_capacity_tokens KV cache capacity of the engine in tokens (num_gpu_blocks x block_size).
# TYPE warden_engine_kv_cache_capacity_tokens gauge
warden_engine_kv_cache_capacity_tokens{replica="0"} 41936
warden_engine_kv_cache_capacity_tokens{replica="1"} 41952
warden_engine_kv_cache_capacity_tokens{replica="2"} 41968
# HELP warden_engine_prefix_cache_queries_tokens_total Prompt tokens the engine looked up in its prefix cache since warden start.
# TYPE warden_engine_prefix_cache_queries_tokens_total counter
warden_engine_prefix_cache_queries_tokens_total{replica="0"} 1e+07
warden_engine_prefix_cache_queries_tokens_total{replica="1"} 1.0131071e+07
warden_engine_prefix_cache_queries_tokens_total{replica="2"} 1.0262142e+07
# HELP warden_engine_prefix_cache_hits_tokens_total Prompt tokens the engine found in its prefix cache since warden start.
# TYPE warden_engine_prefix_cache_hits_tokens_total counter
warden_engine_prefix_cache_hits_tokens_total{replica="0"} 8.1e+06
warden_engine_prefix_cache_hits_tokens_total{replica="1"} 8.177777e+06
warden_engine_prefix_cache_hits_tokens_total{replica="2"} 8.255554e+06
# HELP warden_engine_preemptions_total Engine preemptions since warden start.
# TYPE warden_engine_preemptions_total counter
warden_engine_preemptions_total{replica="0"} 0
warden_engine_preemptions_total{replica="1"} 5
warden_engine_preemptions_total{replica="2"} 10
# HELP warden_sessions_seen_total Distinct sessions seen since warden start.
# TYPE warden_sessions_seen_total counter
warden_sessions_seen_total 241
`
	names := []string{
		"warden_replica_up", "warden_replica_restarts_total", "warden_replica_in_flight_requests",
		"warden_sessions_active", "warden_engine_requests_running", "warden_engine_requests_waiting",
		"warden_engine_kv_cache_capacity_tokens", "warden_engine_prefix_cache_queries_tokens_total",
		"warden_engine_prefix_cache_hits_tokens_total", "warden_engine_preemptions_total",
		"warden_sessions_seen_total",
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// KV usage is a float fraction: compare with the rows directly.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for _, r := range s.Replicas {
		if got := gathered(t, reg, mn.EngineKVUsage, strconv.Itoa(r.Rank)); got != r.KVUsed {
			t.Errorf("kv usage of replica %d = %v, want %v", r.Rank, got, r.KVUsed)
		}
		if got := gathered(t, reg, MetricReplicaErrors, strconv.Itoa(r.Rank)); got != float64(r.Errors) {
			t.Errorf("errors of replica %d = %v, want %v", r.Rank, got, r.Errors)
		}
		if got := gathered(t, reg, mn.EngineGenTokens, strconv.Itoa(r.Rank)); got != r.EngineGenerated {
			t.Errorf("engine generated tokens of replica %d = %v, want %v", r.Rank, got, r.EngineGenerated)
		}
		if got := gathered(t, reg, mn.EnginePromptTokens, strconv.Itoa(r.Rank)); got != r.EnginePrompt {
			t.Errorf("engine prompt tokens of replica %d = %v, want %v", r.Rank, got, r.EnginePrompt)
		}
	}
}

// TestCollectorReadsAtScrapeTime checks that each scrape takes a fresh
// snapshot (no caching, no polling goroutine).
func TestCollectorReadsAtScrapeTime(t *testing.T) {
	var calls atomic.Int64
	c := NewCollector(func() schema.Status {
		n := calls.Add(1)
		return schema.Status{Replicas: []schema.Replica{{Rank: 0, InFlight: int(n)}}}
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for want := 1.0; want <= 3; want++ {
		if got := gathered(t, reg, MetricReplicaInFlight, "0"); got != want {
			t.Fatalf("scrape %v: in flight %v", want, got)
		}
	}
}

// gathered returns the value of the series name{replica=rank} in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, rank string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "replica" && l.GetValue() == rank {
					if g := m.GetGauge(); g != nil {
						return g.GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{replica=%q}", name, rank)
	return 0
}
