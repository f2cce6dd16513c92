// Package monitoring is a farm's monitoring as code: the Grafana dashboard
// (generated from Panels into warden-dashboard.json, which imports as is)
// and the Prometheus alert rules (alerts.yml, tested with promtool over
// testdata/). It reads the metric names the warden exports and owns
// nothing at run time: no command imports it. docs/operations.md
// ("Monitoring a farm") explains each panel and each alert.
package monitoring

//go:generate go run ./gendashboard -o warden-dashboard.json

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Query is one PromQL expression of a panel. Expressions may use the
// dashboard's variables $instance and $replica (regular expressions, so
// always with =~) and Grafana's $__rate_interval.
type Query struct {
	Expr   string
	Legend string
	// NoDataUntil, when set, says why this query may return nothing from a
	// healthy warden (a metric still to come, or one that only appears
	// after the event it counts); the Prometheus test does not count it.
	NoDataUntil string
}

// Panel is one graph of the dashboard.
type Panel struct {
	Title, Description string
	Kind               string // "timeseries" or "stat"
	Unit               string // Grafana unit: percentunit, s, short, reqps...
	Queries            []Query
}

// Row is a titled group of panels.
type Row struct {
	Title  string
	Panels []Panel
}

// sel is the label selector every query carries: the chosen boxes (each
// scraped warden, route or picker is an instance) and replicas.
const sel = `instance=~"$instance", replica=~"$replica"`

const ri = "[$__rate_interval]"

// hitRatio is the engines' prefix-cache hit share grouped by `by`.
func hitRatio(by string) string {
	return "sum by (" + by + ") (rate(warden_engine_prefix_cache_hits_tokens_total{" + sel + "}" + ri + "))\n/ sum by (" + by +
		") (rate(warden_engine_prefix_cache_queries_tokens_total{" + sel + "}" + ri + "))"
}

func quantile(q, metric string) string {
	return "histogram_quantile(" + q + ", sum by (instance, replica, le) (rate(" + metric + "_bucket{" + sel + "}" + ri + ")))"
}

// Rows are the dashboard's panels, top to bottom; docs/operations.md
// describes each under its title.
func Rows() []Row {
	return []Row{{Title: "Farm", Panels: farmPanels()}, {Title: "Per replica", Panels: replicaPanels()}}
}

// farmPanels are one line per box: rotation, reachability, hits, routes,
// failures, KV demand and the miss reasons.
func farmPanels() []Panel {
	return []Panel{
		{Title: "Replicas in rotation", Kind: "stat", Unit: "short",
			Description: "Replicas each box can route to now, of those it has. Fewer than all: see the replica's engine log (docs/operations.md).",
			Queries: []Query{
				{Expr: `sum by (instance) (warden_replica_up{` + sel + `})`, Legend: "{{instance}} up"},
				{Expr: `count by (instance) (warden_replica_up{` + sel + `})`, Legend: "{{instance}} of"},
			}},
		{Title: "Boxes scraped", Kind: "stat", Unit: "short",
			Description: "1 when Prometheus reached the box's /metrics at its last scrape, 0 when the warden, route or picker is down or unreachable.",
			Queries:     []Query{{Expr: `up{instance=~"$instance"}`, Legend: "{{instance}}"}}},
		{Title: "Prefix-cache hits per box", Kind: "timeseries", Unit: "percentunit",
			Description: "Share of prompt tokens the engines found in their prefix cache (vLLM's own counters). Falling while the load stays: sessions move between replicas or the KV cache is overcommitted.",
			Queries:     []Query{{Expr: hitRatio("instance"), Legend: "{{instance}}"}}},
		{Title: "Requests per second by route", Kind: "timeseries", Unit: "reqps",
			Description: "Turns that reached a replica, by why they went there: new (a session's first turn), sticky (stayed home), spill (moved: home over its threshold), failover (home down), pinned, off/hash (affinity off).",
			Queries:     []Query{{Expr: `sum by (instance, route) (rate(warden_requests_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} {{route}}"}}},
		{Title: "Turns kept on their replica", Kind: "timeseries", Unit: "percentunit",
			Description: "Follow-up turns served by their session's replica (sticky) of those that had one (sticky + spill + failover). The warden's own placement; below 90 % the spill threshold or a failing replica moves sessions.",
			Queries: []Query{{Expr: `sum by (instance) (rate(warden_requests_total{` + sel + `, route="sticky"}` + ri + `))
/ sum by (instance) (rate(warden_requests_total{` + sel + `, route=~"sticky|spill|failover"}` + ri + `))`, Legend: "{{instance}}"}}},
		{Title: "Failed requests", Kind: "timeseries", Unit: "reqps",
			Description: "Answers of a server error (5xx, a stream broken off) per second, and requests that never reached an engine and were placed again (retries: the client saw nothing).",
			Queries: []Query{
				{Expr: `sum by (instance, replica) (rate(warden_replica_errors_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} r{{replica}} errors"},
				{Expr: `sum by (instance, replica, reason) (rate(warden_retries_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} r{{replica}} retried: {{reason}}",
					NoDataUntil: "a request is retried (the series appears with its first retry)"},
			}},
		{Title: "Session demand vs KV cache", Kind: "timeseries", Unit: "short",
			Description: "Active sessions times the mean prompt of the last 15 minutes (tokens a box's sessions would keep cached), against the box's total KV cache. Demand above capacity: sessions evict each other's prefixes (overcommit).",
			Queries: []Query{
				{Expr: `sum by (instance) (warden_sessions_active{` + sel + `})
* (sum by (instance) (rate(warden_prompt_tokens_total{` + sel + `}[15m])) / sum by (instance) (rate(warden_requests_total{` + sel + `}[15m])))`, Legend: "{{instance}} demand"},
				{Expr: `sum by (instance) (warden_engine_kv_cache_capacity_tokens{` + sel + `})`, Legend: "{{instance}} capacity"},
			}},
		{Title: "Prefix-cache misses by reason", Kind: "timeseries", Unit: "short",
			Description: "Prompt tokens per second of finished turns that missed the prefix cache, by the ledger's reason: new (no engine had seen them), evicted (pushed out on the replica that served), moved (served away from its prefix), restarted (the engine restarted or cleared its cache), prefix_changed (the client changed its own prefix), unknown (no KV events from the engine).",
			Queries:     []Query{{Expr: `sum by (instance, reason) (rate(warden_prefix_miss_tokens_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} {{reason}}"}}},
	}
}

// replicaPanels are one line per replica of each chosen box.
func replicaPanels() []Panel {
	return []Panel{
		{Title: "Replica up", Kind: "timeseries", Unit: "short",
			Description: "1 while the replica is routable, 0 while its engine starts, restarts or is held out after failures.",
			Queries:     []Query{{Expr: `warden_replica_up{` + sel + `}`, Legend: "{{instance}} r{{replica}}"}}},
		{Title: "Load: requests in flight", Kind: "timeseries", Unit: "short",
			Description: "Requests the warden has open to each replica: what placement balances and the spill threshold reads.",
			Queries:     []Query{{Expr: `warden_replica_in_flight_requests{` + sel + `}`, Legend: "{{instance}} r{{replica}}"}}},
		{Title: "Engine queue: running and waiting", Kind: "timeseries", Unit: "short",
			Description: "vLLM's own running and waiting requests. Waiting above zero for long: the replica is full (max_num_seqs or KV cache).",
			Queries: []Query{
				{Expr: `warden_engine_requests_running{` + sel + `}`, Legend: "{{instance}} r{{replica}} running"},
				{Expr: `warden_engine_requests_waiting{` + sel + `}`, Legend: "{{instance}} r{{replica}} waiting"},
			}},
		{Title: "KV cache used", Kind: "timeseries", Unit: "percentunit",
			Description: "Share of each engine's KV cache in use. Near 100 % with falling hits: more sessions than the cache holds.",
			Queries:     []Query{{Expr: `warden_engine_kv_cache_usage_ratio{` + sel + `}`, Legend: "{{instance}} r{{replica}}"}}},
		{Title: "Prefix-cache hits per replica", Kind: "timeseries", Unit: "percentunit",
			Description: "The hit share of each engine; one replica far below the others has lost its sessions or restarted.",
			Queries:     []Query{{Expr: hitRatio("instance, replica"), Legend: "{{instance}} r{{replica}}"}}},
		{Title: "Time to first byte (p50, p95)", Kind: "timeseries", Unit: "s",
			Description: "From a request's arrival at the warden to the engine's first answer byte, as the client waits for it (queueing and prefill).",
			Queries: []Query{
				{Expr: quantile("0.5", "warden_time_to_first_byte_seconds"), Legend: "{{instance}} r{{replica}} p50"},
				{Expr: quantile("0.95", "warden_time_to_first_byte_seconds"), Legend: "{{instance}} r{{replica}} p95"},
			}},
		{Title: "Time to first token (p95)", Kind: "timeseries", Unit: "s",
			Description: "To the first content (text, reasoning or a tool call), not a role-only chunk: what an agent's user waits for.",
			Queries:     []Query{{Expr: quantile("0.95", "warden_time_to_first_token_seconds"), Legend: "{{instance}} r{{replica}} p95"}}},
		{Title: "Tokens per second", Kind: "timeseries", Unit: "short",
			Description: "Prompt tokens computed and served from the cache, and completion tokens, as the engines reported them per finished request.",
			Queries: []Query{
				{Expr: `sum by (instance, replica) (rate(warden_prompt_tokens_total{` + sel + `}` + ri + `) - rate(warden_cached_prompt_tokens_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} r{{replica}} prompt computed"},
				{Expr: `sum by (instance, replica) (rate(warden_cached_prompt_tokens_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} r{{replica}} prompt cached"},
				{Expr: `sum by (instance, replica) (rate(warden_completion_tokens_total{` + sel + `}` + ri + `))`, Legend: "{{instance}} r{{replica}} completion"},
			}},
		{Title: "KV events and the ledger", Kind: "timeseries", Unit: "short",
			Description: "1 while the warden reads the engine's KV-cache events (its ledger then knows what the engine holds, and the miss reasons are known), and the blocks the ledger has the engine holding.",
			Queries: []Query{
				{Expr: `warden_kv_events_live{` + sel + `}`, Legend: "{{instance}} r{{replica}} events live"},
				{Expr: `warden_ledger_blocks{` + sel + `}`, Legend: "{{instance}} r{{replica}} ledger blocks"},
			}},
		{Title: "Engine restarts and preemptions", Kind: "timeseries", Unit: "short",
			Description: "Engine restarts in the last 15 minutes (the warden restarts a crashed engine) and vLLM preemptions per second (requests evicted for KV space).",
			Queries: []Query{
				{Expr: `increase(warden_replica_restarts_total{` + sel + `}[15m])`, Legend: "{{instance}} r{{replica}} restarts"},
				{Expr: `rate(warden_engine_preemptions_total{` + sel + `}` + ri + `)`, Legend: "{{instance}} r{{replica}} preemptions"},
			}},
		{Title: "Sessions", Kind: "timeseries", Unit: "short",
			Description: "Active sessions homed on each replica (a turn within the session TTL), and new sessions per minute on each box.",
			Queries: []Query{
				{Expr: `warden_sessions_active{` + sel + `}`, Legend: "{{instance}} r{{replica}} active"},
				{Expr: `60 * rate(warden_sessions_seen_total{instance=~"$instance"}` + ri + `)`, Legend: "{{instance}} new per minute"},
			}},
	}
}

// Queries lists every query of the dashboard, in order.
func Queries() []Query {
	var qs []Query
	for _, r := range Rows() {
		for _, p := range r.Panels {
			qs = append(qs, p.Queries...)
		}
	}
	return qs
}

// Resolve replaces the dashboard's variables in expr as Grafana would with
// every box and replica chosen and the given rate interval, so that the
// expression can be sent to Prometheus itself.
func Resolve(expr, rateInterval string) string {
	return strings.NewReplacer(`"$instance"`, `".*"`, `"$replica"`, `".*"`, "$__rate_interval", rateInterval).Replace(expr)
}

// JSON is the Grafana dashboard (warden-dashboard.json): the rows and
// panels above, a Prometheus data source variable, and the instance and
// replica variables (multi-select, "All" by default).
func JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(grafanaDashboard(Rows())); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
