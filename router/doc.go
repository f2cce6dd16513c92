// Package router is the warden's router core: what routing needs and no
// transport. A data plane — proxy (HTTP, `warden serve` and `warden
// route`) or epp (a gateway's external processor) — imports it and holds
// the core through a view of the methods it needs (proxy.Core, epp.Core,
// admin.Core); it imports no data plane.
//
// What it owns (Core):
//   - the replica set and its membership: the backends given at start, and
//     replicas added or removed at run time (membership.go; a published set
//     read without a lock);
//   - the engines' view: /health and /metrics polled every ScrapeInterval
//     (scrape.go, Run), the limits learned from the engines (max_num_seqs,
//     max_model_len), each replica's rotation state (router/engine);
//   - placement: one place.Placer over the replicas (router/place), which
//     keeps the policy, the session table and the adaptive memory;
//   - identifying a request (Identify: the API, the model name mapped to the
//     served one by router/modelname, the session key, the pin);
//   - the accounting of a finished request: turns by route, tokens,
//     cached tokens, time to first token, the replica's failure streak, the
//     decision log (decisionlog.go), the token series (stats.go) and the
//     Prometheus metrics (metrics.go);
//   - the status the panel, /metrics' collector and the exit summary read
//     (status.go), the operations the admin endpoints call (ops.go), and
//     the session table saved across restarts (persist.go).
//
// One request's life, as every data plane drives it (request.go):
//
//	Identify (the model name, the session key from headers and the body's
//	  top-level fields, the placement request)
//	→ Place (the Placer decides, or holds the request while
//	  the policy says wait; the chosen replica counts it in flight in the
//	  same critical section)
//	→ the data plane carries the bytes (forward, stream, tap)
//	→ Finish(Outcome) (accounted, the Placer's End, then out of flight).
//
// A placement with a replica is finished exactly once; an Outcome whose
// Retry says the request never reached the engine (Refused, Reset) is
// counted as retried and ends it, and the data plane places the request
// again with that rank skipped; one the gateway served elsewhere
// (ServedElsewhere) is placed again on the endpoint that served, in the
// same Finish call.
//
// Locks: placement is the Placer's, under its own lock; dyn.mu serialises
// changes of the replica set; each Replica guards its scraped state with
// its mu. Lock order: dyn.mu, then the Placer's, then a replica's mu; never
// the other way round (Core's doc has the detail). Hot counters are
// atomics. The core reads time only from Config.Clock, except the I/O
// deadlines; idle sessions are expired on the Placer's tick, which Run
// starts (TickBalancers).
package router
