package proxy

import (
	"fmt"
	"log/slog"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/proxy/engine"
	"github.com/lmwarden/warden/proxy/place"
)

// Backend is one engine replica the proxy forwards to.
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

// replica is the live state of one engine. Hot counters are atomics; the
// balancer fields are guarded by Proxy.mu; whether it is in rotation is
// health's (engine.Health: the launcher, the checks and the requests send
// it events); the rest is guarded by mu. Lock order: Proxy.mu before mu
// (a placement reads the replicas' views under Proxy.mu).
type replica struct {
	rank         int
	target       *url.URL
	gpus         []string
	maxNumSeqs   atomic.Int64 // may be learned at run time (Backend.Probe)
	maxModelLen  atomic.Int64 // the engine's max_model_len from its /v1/models; 0 until learned (again after a restart)
	learnSeqs    atomic.Bool  // still to ask the server for max_num_seqs
	fallbackSeqs int
	rp           *httputil.ReverseProxy
	log          *slog.Logger

	inflight                                                                  atomic.Int64
	requests, newTurns, sticky, spilledIn, pinned, failover, balanced, errors atomic.Uint64
	prompt, cached, completion                                                atomic.Uint64

	// vLLM DP balancer view (Proxy.mu): stats as of the last refresh and
	// requests sent since.
	staleRunning, staleWaiting, sentSince int

	health *engine.Health

	mu       sync.Mutex
	restarts int
	eng      engine.Scraped
}

func newReplica(b Backend, log *slog.Logger) (*replica, error) {
	u, err := url.Parse(b.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("replica %d: bad URL %q: want http://host:port", b.Rank, b.URL)
	}
	r := &replica{rank: b.Rank, target: u, gpus: b.GPUs, fallbackSeqs: b.FallbackMaxNumSeqs}
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
func (r *replica) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("rank", r.rank), slog.String("url", r.target.String()),
		slog.String("state", r.health.State().String()), slog.Int64("in_flight", r.inflight.Load()))
}

// healthy reports whether the replica is in rotation.
func (r *replica) healthy() bool { return r.health.Routable() }

// seqs is the replica's max_num_seqs (0 = unknown).
func (r *replica) seqs() int { return int(r.maxNumSeqs.Load()) }

// port is the target's port number, 0 if none.
func (r *replica) port() int {
	p, _ := strconv.Atoi(r.target.Port())
	return p
}

// view copies what placement needs. The caller holds Proxy.mu.
func (r *replica) view(active int, now time.Time, fresh, rampUp time.Duration) place.ReplicaView {
	healthy := r.health.Routable()
	joined := r.health.Joined()
	r.mu.Lock()
	e := r.eng.Stats()
	r.mu.Unlock()
	v := place.ReplicaView{
		Rank: r.rank, Healthy: healthy,
		InFlight: int(r.inflight.Load()), Running: e.Running, Waiting: e.Waiting,
		KVUsed: e.KVUsed, ActiveSessions: active, MaxNumSeqs: r.seqs(),
		KVCapacity: e.KVCapacity, StaleRunning: r.staleRunning, StaleWaiting: r.staleWaiting,
		SentSince: r.sentSince,
		Stale:     now.Sub(e.ScrapedAt) > fresh, // never scraped: stale too
	}
	if t := e.HostKVTokens(); t < 0 {
		v.HostKVTokens = place.HostKVUnknown
	} else {
		v.HostKVTokens = t
	}
	if since := now.Sub(joined); !joined.IsZero() && since >= 0 && since < rampUp {
		v.Ramp = 1 - float64(since)/float64(rampUp)
	}
	return v
}

// refreshBalancer takes a new DP-balancer stats sample from the exact
// in-flight count (running up to max_num_seqs, the rest waiting) and
// forgets the requests sent since the last one. The caller holds Proxy.mu.
func (r *replica) refreshBalancer() {
	n := int(r.inflight.Load())
	running := n
	if seqs := r.seqs(); seqs > 0 && n > seqs {
		running = seqs
	}
	r.staleRunning, r.staleWaiting, r.sentSince = running, n-running, 0
}

// count adds one served turn to the reason's counter.
func (r *replica) count(reason place.Reason) {
	r.requests.Add(1)
	switch reason {
	case place.ReasonNew:
		r.newTurns.Add(1)
	case place.ReasonSticky:
		r.sticky.Add(1)
	case place.ReasonSpill:
		r.spilledIn.Add(1)
	case place.ReasonPinned:
		r.pinned.Add(1)
	case place.ReasonFailover:
		r.failover.Add(1)
	case place.ReasonOff, place.ReasonHash:
		r.balanced.Add(1)
	}
}
