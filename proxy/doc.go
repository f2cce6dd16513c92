// Package proxy is warden's in-process router: the request path from a
// client to one engine replica, as a straight line in one file (request.go,
// top down from serveProxied):
//
//	read the body (badContentType, readBody: ≤ --max-body-bytes)
//	→ identify (prepare: identity.Scan once; compat's rewrites — model name,
//	  server tools, billing line, include_usage; identity.ExtractFrom)
//	→ place or hold (place.Placer.Place: the replicas' views, place.Pick and
//	  the chosen replica's in-flight increment in one critical section; a
//	  request the policy holds waits there until a request ends)
//	→ forward (forward: httputil.ReverseProxy to 127.0.0.1:port through
//	  compat.Transport, the answer streamed back through a tap.Tap)
//	→ account (account: counters, metrics, engine.Health's request event,
//	  place.Placer.End) → log (logDecision: one decision.Record handed to
//	  the decision log's writer).
//
// What lives where:
//   - router/identity — which conversation a request belongs to; no state.
//   - router/tap — usage read from JSON or SSE without changing the bytes.
//   - proxy/compat — client compatibility rewrites and engine fallbacks.
//   - router/place — placement: the policies (pure: Pick), the adaptive
//     policy's Memory, the session Table, and their one owner Placer (its
//     own lock; the decision, holding, the end of a request, the balancer
//     ticks). The proxy's replicas are its place.Replicas.
//   - router/engine — one replica's rotation state machine and scraped
//     /metrics state; no I/O.
//   - router/metricname — the engine metric names (vLLM's and the warden's
//     mirrors), shared by engine and panel.
//   - router/decision — the decision log's line: its schema and encoding
//     (bench reads the log through it without linking the router).
//   - router/panel — the status schema, HTML page, `warden status`, summary.
//   - sim/replay — a discrete-event replay of placement (through a
//     place.Placer) on the simulator's scheduler (research; not in the
//     warden's path).
//
// This package holds the Proxy — its configuration, lifecycle and wiring
// (proxy.go) — and its replicas (replica.go), the request path
// (request.go), faults and hostile input (faults.go: a broken stream ends
// with an error event naming the replica, the warden's error body, the API
// key), scraping and health checks (scrape.go: the proxy fetches, engine
// interprets; Run), the warden's own endpoints (admin.go: /health,
// /v1/models, /metrics, /warden/status, /warden/policy,
// /warden/reset_prefix_cache; status.go, metrics.go, stats.go), replicas
// changed at run time (dynamic.go: /warden/replicas, probed servers,
// another warden as a replica), the session table saved across restarts
// (persist.go) and the decision log's writer, off the request path
// (decisionlog.go). The lock order is written where the locks are declared
// (Proxy, place.Placer, replica). The proxy reads time only from
// Config.Clock.
package proxy
