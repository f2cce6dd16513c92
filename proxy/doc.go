// Package proxy is warden's in-process router: the request path from a
// client to one engine replica, as a straight line (proxy.go serveProxied,
// forward.go):
//
//	read the body (≤ --max-body-bytes) → prepare: identity.Scan once, compat's
//	rewrites (model name, server tools, billing line), identity.ExtractFrom
//	→ place (or hold): snapshot the replicas under Proxy.mu, place.Pick,
//	in-flight increment, session table and place.Memory updated
//	→ forward: httputil.ReverseProxy to 127.0.0.1:port through compat.Transport,
//	the answer streamed back through a tap.Tap → account: counters, stats,
//	engine.Health's request event, Memory.End.
//
// What lives where:
//   - proxy/identity — which conversation a request belongs to; no state.
//   - proxy/tap — usage read from JSON or SSE without changing the bytes.
//   - proxy/compat — client compatibility rewrites and engine fallbacks.
//   - proxy/place — the placement policies (pure), their memory and the
//     session table; no I/O, no clock, no locks of its own.
//   - proxy/engine — one replica's rotation state machine and scraped
//     /metrics state; no I/O.
//   - proxy/panel — the status schema, HTML page, `warden status`, summary.
//   - proxy/replay — a discrete-event replay of placement on the
//     simulator's scheduler (research; not in the warden's path).
//
// This package wires them: the Proxy and its replicas (proxy.go,
// replica.go), the request path (forward.go, policy_proxy.go: holding
// requests for room), faults and hostile input (faults.go: a broken stream
// ends with an error event naming the replica, 504 without response
// headers in time, 415 for non-JSON bodies, the API key), scraping and
// health checks (scrape.go: the proxy fetches, engine interprets), the
// warden's own endpoints (admin.go: /health, /v1/models, /metrics,
// /warden/status, /warden/policy, /warden/reset_prefix_cache; status.go,
// metrics.go, stats.go), replicas changed at run time (dynamic.go:
// /warden/replicas, probed servers, another warden as a replica) and the
// session table saved across restarts (persist.go), and the optional
// decision log, one JSON line per routed request written off the request
// path (decisionlog.go). The lock order is
// written where the locks are declared (Proxy.mu, replica.mu). The proxy
// reads time only from Config.Clock.
package proxy
