// Package proxy is the warden's HTTP data plane over the router core
// (package router, through the Core view this package names): it reads a client's request, identifies it, asks the
// core where it goes, forwards it with the answer streamed back through
// the usage tap, and hands the outcome to the core. It decides nothing
// itself: placement, the replicas' state, accounting and the status are
// the core's. The walk of one request is a straight line in request.go,
// top down from serveProxied:
//
//	read the body (badContentType, readBody: ≤ --max-body-bytes, 413 after
//	  draining the rest)
//	→ identify (prepare: router.Core.Identify — API, model name mapped or
//	  refused, session key, pin, one pass over the body — then compat's
//	  edits: server tools, billing line, include_usage; the model name last)
//	→ place or hold (router.Core.Place: the Placer's decision and the
//	  chosen replica's in-flight increment in one critical section; a
//	  request the policy holds waits there until a request ends; the client
//	  gone while held is a 499)
//	→ forward (forward: the one httputil.ReverseProxy for every replica,
//	  the attempt in the request's context naming the target; through
//	  compat.Transport to 127.0.0.1:port, the answer streamed back through a
//	  tap.Tap; X-Warden-Route and X-Warden-Replica on the answer)
//	→ retry elsewhere only when the request provably never reached an
//	  engine (proxyError's ladder: a refused dial, a connection the engine
//	  closed or reset before any answer byte), the ranks tried skipped
//	→ finish (outcome: status, cause, usage, first token, or why it was
//	  retried — refused or reset — → router.Core.Finish, one call, in a
//	  defer, so a body copy that panics with ErrAbortHandler is accounted
//	  too).
//
// Files: proxy.go the Proxy (Config with the data plane's own settings and
// their defaults, the Core view, New over a core, the mux: /v1/* here, the admin endpoints from package
// admin); request.go the walk above and the reverse proxy's hooks;
// faults.go faults and hostile input (a stream that breaks off ends with
// an error event naming the replica, an engine's 5xx body names it too,
// /v1/* without the API key is a 401; the warden's own error bodies go
// through internal/apierr).
//
// Beside it: proxy/compat (client adaptations and engine fallbacks, as a
// RoundTripper), admin (/health, /metrics, /warden/*), router (the core)
// and router/{place,identity,tap,engine,decision,modelname}. The proxy reads
// time from the core's clock (router.Config.Clock); only I/O deadlines (the response-header timeout,
// the body drain) run on real timers. It holds no lock of its own across a
// request: the state it touches is the core's.
package proxy
