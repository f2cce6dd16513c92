package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the warden's own request metrics (per-replica state mirrored
// from Status is panel.NewCollector's). Labels are replica and route, never
// a session id.
type metrics struct {
	requests   *prometheus.CounterVec
	inFlight   prometheus.Gauge
	prompt     *prometheus.CounterVec
	cached     *prometheus.CounterVec
	completion *prometheus.CounterVec
	ttfb       *prometheus.HistogramVec
	ttft       *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	// replaysRefused: requests not replayed again (the replay budget)
	replaysRefused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_requests_total",
			Help: "Proxied requests that reached a replica, by replica and route reason (new, sticky, spill, pinned, failover, off, hash).",
		}, []string{"replica", "route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warden_requests_in_flight",
			Help: "Proxied requests in flight on all replicas.",
		}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_prompt_tokens_total",
			Help: "Prompt tokens of finished requests as the engines reported them (cached included).",
		}, []string{"replica"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_cached_prompt_tokens_total",
			Help: "Prompt tokens the engines reported served from the prefix cache.",
		}, []string{"replica"}),
		completion: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_completion_tokens_total",
			Help: "Completion tokens of finished requests as the engines reported them.",
		}, []string{"replica"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_time_to_first_byte_seconds",
			Help:    "Time from the request's arrival to the engine's first response body byte (first SSE event when streaming).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80},
		}, []string{"replica"}),
	}
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "warden_time_to_first_token_seconds",
		Help:    "Time from the request's arrival to the engine's first answer content (a stream's first event with text, reasoning or a tool call; a whole JSON answer's arrival): what clients wait for, and what placement learns from.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80},
	}, []string{"replica"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warden_retries_total",
		Help: "Requests that never reached an engine (a refused connection, or one closed or reset before any answer byte) and were placed again elsewhere, by the replica that failed them and why.",
	}, []string{"replica", "reason"})
	m.replaysRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warden_replays_refused_total",
		Help: "Requests an engine closed or reset before answering that were not replayed again: they had used their replays (--max-replays; a request that crashes engines visits no more replicas) and the client got 502.",
	})
	for _, c := range []prometheus.Collector{m.requests, m.inFlight, m.prompt, m.cached, m.completion, m.ttfb, m.ttft, m.retries, m.replaysRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ReplayRefused counts a request that was not replayed again: it had used
// its replays (warden_replays_refused_total).
func (c *Core) ReplayRefused() { c.metrics.replaysRefused.Inc() }
