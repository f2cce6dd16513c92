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
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
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
	fullScrape   atomic.Bool  // its /metrics answered the name[] filter without the series asked: read it whole
	fallbackSeqs int
	fresh        time.Duration // metrics older than this are stale (staleAfter scrape intervals)
	rampUp       time.Duration // Config.RampUp
	log          *slog.Logger
	rankValue    []string // the rank as a header value (identity.PinHeader on its responses)

	inflight                                                                  atomic.Int64 // raised in the Placer's decision (Sent), lowered when the request has been accounted
	requests, newTurns, sticky, spilledIn, pinned, failover, balanced, errors atomic.Uint64
	prompt, cached, completion                                                atomic.Uint64

	health *engine.Health

	mu        sync.Mutex
	restarts  int
	lastCrash *panel.Crash // the launcher's last report of a crash; nil = none
	eng       engine.Scraped
}

func newReplica(b Backend, cfg *Config) (*Replica, error) {
	u, err := url.Parse(b.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("replica %d: bad URL %q: want http://host:port", b.Rank, b.URL)
	}
	r := &Replica{rank: b.Rank, target: u, gpus: b.GPUs, fallbackSeqs: b.FallbackMaxNumSeqs,
		fresh: staleAfter * cfg.ScrapeInterval, rampUp: cfg.RampUp, rankValue: []string{strconv.Itoa(b.Rank)}}
	log := cfg.Logger
	r.log = log.With("replica", b.Rank)
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
	return slog.GroupValue(slog.Int("rank", r.rank), slog.String("url", r.target.String()),
		slog.String("state", r.health.State().String()), slog.Int64("in_flight", r.inflight.Load()))
}

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
