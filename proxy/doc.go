// Package proxy is warden's in-process router: it owns the request path from
// a client to one engine replica. It finds which conversation a request
// belongs to (session.go), places it with a pure policy over a snapshot of
// the replicas (placement.go), forwards it with httputil.ReverseProxy,
// streaming SSE through unbuffered while a tap reads the usage report
// (proxy.go, usage.go), keeps per-replica and per-session state and token
// statistics (replica.go, table.go, stats.go), scrapes each engine's
// /metrics and /health (scrape.go), and serves the warden's own endpoints:
// /health, /v1/models, /metrics, /warden/status, /warden/policy and
// /warden/reset_prefix_cache (admin.go, status.go, metrics.go). The replica
// set can change at run time (dynamic.go: /warden/replicas, replicas that
// are probed rather than launched, another warden as a replica), and the
// session table can be saved and reloaded across restarts (persist.go).
package proxy
