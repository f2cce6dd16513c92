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
// faults.go holds the answers to faults and hostile input: a stream the
// engine breaks off ends with an SSE error event naming the replica, an
// engine without response headers in time gets 504, three failed requests
// in a row take a replica out of rotation for a cooldown (never the last
// one), non-JSON content types get 415, and the optional API key is
// checked on /v1/* and never forwarded or logged.
package proxy
