package router

import (
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/ledger"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/schema"
)

// Backend is one engine replica the core routes to.
type Backend struct {
	Rank       int
	URL        string   // engine base URL, e.g. http://127.0.0.1:8101
	GPUs       []string // GPU indices or UUIDs of its group, for display
	MaxNumSeqs int      // the engine's --max-num-seqs; 0 = unknown (spill threshold 1; with Probe: ask the server)

	// Probe marks a server the warden did not start (warden route): it is
	// out of rotation until its first successful health check, and when
	// MaxNumSeqs is 0 its max_num_seqs is asked from the server then,
	// FallbackMaxNumSeqs being assumed until (unless) the server says.
	Probe              bool
	FallbackMaxNumSeqs int

	// DPPinned marks one engine of a vLLM server run with
	// --data-parallel-size (its engines behind one API server at URL): the
	// replica is engine DPRank there. Its requests carry the
	// X-data-parallel-rank header, which vLLM's chat completions,
	// completions and Anthropic messages endpoints obey (its Responses
	// endpoint does not: docs/vllm-dp.md), and its load and cache are read
	// from the series with engine=DPRank. Several replicas share the URL.
	DPPinned bool
	DPRank   int
	// DP is how many data-parallel engines URL serves, as `URL#dp=N` said
	// (ParseReplica; 0 = not said): ExpandDP makes N>1 into N pinned
	// replicas, and N=1 keeps the server one replica.
	DP int
	// LearnDP: read the engines from the server's /metrics, and when it
	// reports more than one, become one pinned replica per engine (warden
	// route's default for a URL without #dp=).
	LearnDP bool
	// KVEvents is where its engine publishes KV-cache events (truth.go);
	// zero: none, placement uses the estimate for it.
	KVEvents KVEvents
}

// ExpandDP is b as its replicas: one pinned to each of its DP engines when
// b.DP > 1, else b itself. Rank is left for the caller to set.
func (b Backend) ExpandDP() []Backend {
	if b.DP <= 1 || b.DPPinned {
		return []Backend{b}
	}
	out := make([]Backend, b.DP)
	for i := range out {
		out[i] = b
		out[i].DPPinned, out[i].DPRank, out[i].LearnDP = true, i, false
		out[i].KVEvents = b.KVEvents.ForRank(i)
	}
	return out
}

// Key is how a replica is told apart, saved and re-added: its canonical URL,
// with #dp_rank=N for one engine of a data-parallel server (ParseReplica
// reads it back).
func (b Backend) Key() string {
	if b.DPPinned {
		return b.URL + "#dp_rank=" + strconv.Itoa(b.DPRank)
	}
	return b.URL
}

// Replica is the live state of one engine, and a place.Replica to the
// Core's Placer. Hot counters are atomics; whether it is in rotation is
// health's (engine.Health: the launcher, the checks and the requests send
// it events); the rest is guarded by mu. Lock order: the Placer's lock
// before mu (a placement reads the replicas' views under it).
type Replica struct {
	rank         int
	target       *url.URL
	gpus         []string
	maxNumSeqs   atomic.Int64 // may be learned at run time (Backend.Probe)
	maxModelLen  atomic.Int64 // the engine's max_model_len from its /v1/models; 0 until learned (again after a restart)
	learnSeqs    atomic.Bool  // still to ask the server for max_num_seqs
	seqsTries    atomic.Int32 // checks whose asking got no answer (learnLimits)
	fullScrape   atomic.Bool  // its /metrics answered the name[] filter without the series asked: read it whole
	fallbackSeqs int
	fresh        time.Duration // metrics older than this are stale (staleAfter scrape intervals)
	rampUp       time.Duration // Config.RampUp
	log          *slog.Logger
	rankValue    []string // the rank as a header value (identity.PinHeader on its responses)
	spec         Backend  // what it was made from (its URL canonical)
	dpValue      []string // the engine's data-parallel rank as a header value; nil when not pinned
	learnDP      atomic.Bool
	pinIgnored   atomic.Bool // PinIgnored said so
	modelsDenied atomic.Bool // its /v1/models answered 401/403, said once

	inflight                                                                  atomic.Int64 // raised in the Placer's decision (Sent), lowered when the request has been accounted
	requests, newTurns, sticky, spilledIn, pinned, failover, balanced, errors atomic.Uint64
	prompt, cached, completion                                                atomic.Uint64

	health *engine.Health
	kv     kvState // the engine's truth: its part of the ledger and its feed (truth.go)

	mu        sync.Mutex
	restarts  int
	lastCrash *schema.Crash // the launcher's last report of a crash; nil = none
	eng       engine.Scraped
}

func newReplica(b Backend, cfg *Config) (*Replica, error) {
	u, err := url.Parse(b.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("replica %d: bad URL %q: want http://host:port", b.Rank, b.URL)
	}
	b.URL = canonicalURL(u)
	r := &Replica{rank: b.Rank, target: u, gpus: b.GPUs, fallbackSeqs: b.FallbackMaxNumSeqs,
		fresh: staleAfter * cfg.ScrapeInterval, rampUp: cfg.RampUp, rankValue: []string{strconv.Itoa(b.Rank)}, spec: b}
	log := cfg.Logger
	r.log = log.With("replica", b.Rank)
	if b.DPPinned {
		if b.DPRank < 0 {
			return nil, fmt.Errorf("replica %d: data-parallel rank %d: want 0 or more", b.Rank, b.DPRank)
		}
		r.dpValue = []string{strconv.Itoa(b.DPRank)}
		r.log = r.log.With("dp_rank", b.DPRank)
	}
	r.learnDP.Store(b.LearnDP && !b.DPPinned)
	r.kv.ledger, r.kv.cfg = ledger.NewEngine(cfg.MaxSessions, cfg.Clock), b.KVEvents
	r.health = engine.NewHealth(b.Probe, r.log) // a probed server: out until it answers
	r.maxNumSeqs.Store(int64(b.MaxNumSeqs))
	if b.Probe && b.MaxNumSeqs == 0 {
		r.maxNumSeqs.Store(int64(b.FallbackMaxNumSeqs))
		r.learnSeqs.Store(true)
	}
	return r, nil
}

// LogValue makes a replica log as its rank, URL and state.
func (r *Replica) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("rank", r.rank), slog.String("url", r.Key()),
		slog.String("state", r.health.State().String()), slog.Int64("in_flight", r.inflight.Load()))
}

// DPRank is the vLLM data-parallel engine the replica is pinned to, as an
// X-data-parallel-rank header value (one shared slice: do not modify it);
// nil for a replica that is a whole server.
func (r *Replica) DPRank() []string { return r.dpValue }

// DPRankHeader is the request header that sends a request to one engine
// of a vLLM server run with --data-parallel-size (vLLM 0.32: read by its
// chat completions, completions and Anthropic messages endpoints,
// entrypoints/.../serving.py _get_data_parallel_rank; its Responses
// endpoint does not pass it on). Canonical form.
const DPRankHeader = "X-Data-Parallel-Rank"

// PinIgnored says, once per replica, that a request was sent to an
// endpoint of vLLM that ignores DPRankHeader: vLLM's own balancer chose its
// engine, so the warden's per-replica counts for such requests are where it
// asked, not where they ran.
func (r *Replica) PinIgnored(path string) {
	if r.pinIgnored.CompareAndSwap(false, true) {
		r.log.Warn("vLLM does not read X-data-parallel-rank on this endpoint: its own balancer picks the "+
			"engine, so these requests are not pinned (and not cache-affine); chat completions, completions "+
			"and messages are", "path", path)
	}
}

// Key is the replica's identity: its URL, with #dp_rank=N when it is one
// engine of a data-parallel server.
func (r *Replica) Key() string { return r.spec.Key() }

// Healthy reports whether the replica is in rotation.
func (r *Replica) Healthy() bool { return r.health.Routable() }

// URL is the engine's base URL. Do not modify it.
func (r *Replica) URL() *url.URL { return r.target }

// Log is the replica's logger (its records carry its rank).
func (r *Replica) Log() *slog.Logger { return r.log }

// RankValue is the rank as a header value, one shared slice: do not
// modify it.
func (r *Replica) RankValue() []string { return r.rankValue }

// Refused records a connection the engine refused: the request never
// reached it, and the replica leaves the rotation until a health check
// succeeds.
func (r *Replica) Refused(err error) { r.health.Refused(err) }

// InFlight is the number of requests placed on it and not yet finished.
func (r *Replica) InFlight() int { return int(r.inflight.Load()) }

// seqs is the replica's max_num_seqs (0 = unknown).
func (r *Replica) seqs() int { return int(r.maxNumSeqs.Load()) }

// port is the target's port number, 0 if none.
func (r *Replica) port() int {
	p, _ := strconv.Atoi(r.target.Port())
	return p
}

// Rank is its rank (place.Replica).
func (r *Replica) Rank() int { return r.rank }

// View copies what placement needs (place.Replica); the Placer calls it
// under its lock.
func (r *Replica) View(now time.Time) place.ReplicaView {
	healthy := r.health.Routable()
	joined := r.health.Joined()
	r.mu.Lock()
	e := r.eng.Stats()
	r.mu.Unlock()
	v := place.ReplicaView{
		Rank: r.rank, Healthy: healthy,
		InFlight: int(r.inflight.Load()), Running: e.Running, Waiting: e.Waiting,
		KVUsed: e.KVUsed, MaxNumSeqs: r.seqs(), KVCapacity: e.KVCapacity,
		Stale: now.Sub(e.ScrapedAt) > r.fresh, // never scraped: stale too
	}
	if t := e.HostKVTokens(); t < 0 {
		v.HostKVTokens = place.HostKVUnknown
	} else {
		v.HostKVTokens = t
	}
	if since := now.Sub(joined); !joined.IsZero() && since >= 0 && since < r.rampUp {
		v.Ramp = 1 - float64(since)/float64(r.rampUp)
	}
	return v
}

// Sent counts one more request in flight (place.Replica: in the Placer's
// decision, so that a burst cannot herd onto one replica).
func (r *Replica) Sent() { r.inflight.Add(1) }
