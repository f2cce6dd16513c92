package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/warden/proxy/compat"
	"github.com/lmwarden/warden/proxy/identity"
	"github.com/lmwarden/warden/proxy/panel"
	"github.com/lmwarden/warden/proxy/place"
)

// Config configures a Proxy. Zero values get the defaults named per field.
type Config struct {
	ServedModel       string        // the one model name /v1/models answers with and every request's model is mapped to; "" = ask a replica, no mapping
	StrictModel       bool          // refuse (404, like vLLM) a model name other than ServedModel instead of mapping it
	Policy            string        // placement policy (place.Policies()); "" = "adaptive"
	SpillThreshold    int           // in-flight above which a sticky turn spills; 0 = auto max(1, max_num_seqs/4)
	AdmitWait         time.Duration // adaptive: longest hold of a new conversation without KV room; 0 = auto (5 mean turn times), < 0 = never hold
	MoveCooldown      int           // adaptive: turns a moved conversation stays put; 0 = 3
	KVFill            float64       // adaptive: fraction of each replica's KV capacity working sets are planned into; 0 = 1.0
	SessionHeaders    []string      // extra request headers that carry a session id
	KeepBillingHeader bool          // forward Claude Code's billing system block instead of removing it
	// SubagentsWithParent places a subagent's requests (the parent's session
	// id plus an agent id) on its parent's session, as before subagents were
	// told apart; false: each subagent is a conversation of its own, placed
	// by load (identity.SessionKey.Conversation).
	SubagentsWithParent bool
	MaxBodyBytes        int64         // request body limit; 0 = 32 MiB
	MaxSessions         int           // session table bound (LRU beyond); 0 = 100000
	SessionTTL          time.Duration // idle sessions expire after this; 0 = 1h
	AdminToken          string        // bearer token for admin endpoints from non-loopback callers; "" = loopback only
	ScrapeInterval      time.Duration // engine /metrics + /health poll; 0 = 1s
	BalancerInterval    time.Duration // refresh of the "off" balancer's engine stats; 0 = 100ms
	Logger              *slog.Logger  // nil = slog.Default()
	Registry            *prometheus.Registry
	// Clock is the one clock the proxy reads time from (nil = time.Now):
	// session TTL, series buckets, balancer refresh, times to first byte,
	// turn times, failure cooldowns. Only I/O deadlines (the response-header
	// timeout, draining an over-limit body) run on real timers.
	Clock func() time.Time
	Seed  uint64 // tie-break randomness; 0 = random

	// Faults and exposure (faults.go).
	APIKey string // clients must send it (Authorization: Bearer or x-api-key) on /v1/*; "" = no key
	// ResponseHeaderTimeout bounds the wait for an engine's response headers
	// (a stream's come at once, a non-streaming answer's when it is complete);
	// then the client gets 504 naming the replica. 0 = 10m.
	ResponseHeaderTimeout time.Duration
	FailCooldown          time.Duration // out of rotation after engine.ReqFailsDown failed requests at least this long; 0 = 10s
	// RampUp is how long a replica that came back into the rotation takes to
	// reach its full share of new conversations. 0 = 30s, < 0 = at once.
	RampUp time.Duration

	// DecisionLog is a file that gets one JSON line per routed request
	// (decisionlog.go); "" = off. It is rotated at DecisionLogMaxMB
	// megabytes (0 = 100), keeping three old files.
	DecisionLog      string
	DecisionLogMaxMB int

	// Engines is how `warden serve` started the engines, reported in the
	// status; its ToolsFix is added to an engine's refusal of tools (compat).
	// nil for `warden route`.
	Engines *panel.EngineSetup
}

// staleAfter scrape intervals without a good scrape make a replica's
// metrics stale: it counts as busy for new placements.
const staleAfter = 3

// Validate checks the settings a user gives (each named by the warden flag
// that sets it); zero values are valid and mean the defaults. It is the one
// place they are checked: the commands call it before anything starts, New
// again.
func (c Config) Validate() error {
	if err := place.ValidPolicy(c.Policy); c.Policy != "" && err != nil {
		return err
	}
	switch {
	case c.SpillThreshold < 0:
		return fmt.Errorf("--spill-threshold must be >= 0 (0 means auto), got %d", c.SpillThreshold)
	case c.MoveCooldown < 0:
		return fmt.Errorf("--move-cooldown must be >= 0 turns (0 means auto = %d), got %d", place.DefaultMoveCooldown, c.MoveCooldown)
	case c.KVFill < 0 || c.KVFill > 4:
		return fmt.Errorf("--kv-fill must be a fraction of the KV cache in (0, 4] (0 means auto = %v), got %v", place.DefaultFill, c.KVFill)
	case c.BalancerInterval < 0:
		return fmt.Errorf("--balancer-interval must be positive, got %v", c.BalancerInterval)
	case c.ResponseHeaderTimeout < 0:
		return fmt.Errorf("--response-header-timeout must be positive, got %v", c.ResponseHeaderTimeout)
	case c.DecisionLogMaxMB < 0:
		return fmt.Errorf("--decision-log-max-mb must be >= 1, got %d", c.DecisionLogMaxMB)
	}
	return nil
}

func (c *Config) defaults() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Policy == "" {
		c.Policy = place.PolicyAdaptive
	}
	if err := place.ValidPolicy(c.Policy); err != nil {
		return err
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 100_000
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = time.Hour
	}
	if c.ResponseHeaderTimeout <= 0 {
		c.ResponseHeaderTimeout = 10 * time.Minute
	}
	if c.FailCooldown <= 0 {
		c.FailCooldown = 10 * time.Second
	}
	if c.ScrapeInterval <= 0 {
		c.ScrapeInterval = time.Second
	}
	if c.RampUp == 0 {
		c.RampUp = 30 * time.Second
	}
	if c.BalancerInterval <= 0 {
		c.BalancerInterval = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return nil
}

// Proxy routes client requests to engine replicas. Create it with New.
type Proxy struct {
	cfg          Config
	log          *slog.Logger
	clock        func() time.Time
	set          atomic.Pointer[replicaSet] // the replicas (dynamic.go)
	client       *http.Client               // health and scrape
	checkTimeout time.Duration
	since        time.Time
	metrics      *metrics
	series       *series
	handler      http.Handler
	clients      *compat.Clients // model-name mapping and request adaptation
	starting     atomic.Bool     // engines still starting: /health is 503 (SetStarting)
	decisions    *decisionLog    // --decision-log; nil = off

	// mu guards everything below and the replicas' balancer fields. Lock
	// order: mu before a replica's mu (placement reads every replica's view
	// under mu); never the other way round. engine.Health has its own lock,
	// taken under either and taking none.
	mu          sync.Mutex
	policy      string
	rng         *rand.Rand
	sessions    *place.Table
	lastRefresh time.Time
	ticking     bool   // Run refreshes the balancer view on its own tick
	knownTurns  uint64 // turns of sessions that already had a home
	homeTurns   uint64 // ... served on that home
	peak        peakState
	dyn         dynState      // adding and removing replicas (dynamic.go)
	route       *place.Memory // the adaptive policy's estimates
	held        int           // requests held at the proxy for room (place.ReasonWait)
	wake        chan struct{} // closed and replaced when a request ends while some are held
}

// New builds a proxy over the backends (at least one, unique ranks).
func New(cfg Config, backends []Backend) (*Proxy, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if len(backends) == 0 {
		return nil, errors.New("proxy: no backends")
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, clock: cfg.Clock,
		checkTimeout: 2 * time.Second, policy: cfg.Policy,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		sessions: place.NewTable(cfg.SessionTTL, cfg.MaxSessions),
		route:    place.NewMemory(cfg.MaxSessions), wake: make(chan struct{})}
	p.since = p.clock()
	p.clients = compat.New(cfg.ServedModel, cfg.StrictModel, p.log)
	p.series = newSeries(10*time.Second, time.Hour)
	tr := newTransport()
	p.client = &http.Client{Transport: tr}
	hints := compat.FlagHints{Launched: cfg.Engines != nil}
	if cfg.Engines != nil {
		hints.ToolsFix = cfg.Engines.ToolsFix
	}
	p.dyn.rt = &compat.Transport{Next: tr, Clients: p.clients, Hints: hints}
	byRank := map[int]*replica{}
	var list []*replica
	for _, b := range backends {
		if _, dup := byRank[b.Rank]; dup {
			return nil, fmt.Errorf("proxy: rank %d given twice", b.Rank)
		}
		r, err := newReplica(b, p.log)
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		r.rp = p.reverseProxy(r, p.dyn.rt)
		byRank[b.Rank] = r
		list = append(list, r)
	}
	p.publish(list)
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("proxy: metrics: %w", err)
	}
	p.metrics = m
	if err := cfg.Registry.Register(panel.NewCollector(p.Status)); err != nil {
		return nil, fmt.Errorf("proxy: panel collector: %w", err)
	}
	if err := p.startDecisionLog(); err != nil {
		return nil, err
	}
	p.handler = p.routes()
	return p, nil
}

func newTransport() *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // the usage tap reads plain bytes
	}
}

// Handler returns the warden's HTTP handler: proxied /v1/* and its own
// endpoints.
func (p *Proxy) Handler() http.Handler { return p.handler }

// SetStarting marks the start of the engines as under way (true) or over
// (false); /health answers 503 while it is under way, even though the
// replicas already loaded take requests.
func (p *Proxy) SetStarting(on bool) { p.starting.Store(on) }

// SetReplicaState records the launcher's view of a replica (its OnState
// callback). up=false takes it out of rotation at once.
func (p *Proxy) SetReplicaState(rank int, up bool, state, reason string) {
	r := p.lookup(rank)
	if r == nil {
		p.log.Warn("state for an unknown replica", "replica", rank, "state", state)
		return
	}
	r.health.Launcher(up, state, reason, p.clock())
}

// NoteRestart counts a restart of the replica's engine; its counters start
// from zero again.
func (p *Proxy) NoteRestart(rank int) {
	r := p.lookup(rank)
	if r == nil {
		return
	}
	r.mu.Lock()
	r.restarts++
	r.eng.Restarted()
	r.mu.Unlock()
	r.maxModelLen.Store(0) // learned again: the new engine may fit another context
	p.cacheWiped(rank, "the engine restarted")
}

// cacheWiped forgets what the placement believed the replica's prefix
// cache held, after a restart, a counter reset or /reset_prefix_cache: its
// conversations lose their home there and are placed by load on their next
// turn, and its shared-prefix and residency estimates start afresh.
func (p *Proxy) cacheWiped(rank int, why string) {
	p.mu.Lock()
	n := p.sessions.Unhome(rank)
	p.route.Wiped(rank)
	p.mu.Unlock()
	if r := p.lookup(rank); r != nil {
		r.log.Info("prefix cache emptied: its conversations will be placed by load", "why", why, "conversations", n)
	}
}

// Bounds on reading what is left of an over-limit body before the 413.
const (
	drainMaxBytes = 64 << 20
	drainMaxTime  = 10 * time.Second
)

// readBody reads the request body up to the limit, answering 413 itself
// when it is over. Before the 413 it reads and drops the rest of the body
// (up to drainMaxBytes, for drainMaxTime): a client that sends its whole
// body before reading (no Expect: 100-continue, as Python's urllib and
// httpx) would otherwise get a broken pipe instead of the answer.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxBodyBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return nil, false
	}
	if int64(len(body)) > p.cfg.MaxBodyBytes {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainMaxTime))
		if n, _ := io.CopyN(io.Discard, r.Body, drainMaxBytes); n == drainMaxBytes {
			w.Header().Set("Connection", "close") // more is coming: this connection cannot be reused
		}
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body exceeds the warden's limit of %d bytes (--max-body-bytes)", p.cfg.MaxBodyBytes))
		return nil, false
	}
	return body, true
}

// serveProxied places and forwards one /v1/* request, retrying on another
// replica only when it provably never reached an engine.
func (p *Proxy) serveProxied(w http.ResponseWriter, r *http.Request) {
	start := p.clock()
	if msg := badContentType(r); msg != "" {
		writeError(w, http.StatusUnsupportedMediaType, msg)
		return
	}
	body, ok := p.readBody(w, r)
	if !ok {
		return
	}
	req := p.prepare(r, body)
	if req.refuse != "" {
		compat.WriteModelNotFound(w, r.URL.Path, req.refuse)
		return
	}
	pin, pinned, err := identity.ParsePin(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var tried []int
	for range p.replicaList() {
		pl := p.placeOrHold(r, req, pinned, pin, tried)
		if pl.d.Rank < 0 {
			if pl.d.Reason == place.ReasonWait { // client went away while held
				w.WriteHeader(499)
				return
			}
			break
		}
		if !p.forward(w, r, req, pl, start) {
			return
		}
		tried = append(tried, pl.d.Rank)
	}
	msg := "no replica is available"
	if pinned {
		msg = fmt.Sprintf("replica %d (X-Warden-Replica) does not exist or is not available", pin)
	}
	writeError(w, http.StatusServiceUnavailable, msg)
}

// placement is one decision plus what the accounting needs about it.
type placement struct {
	d      place.Decision
	rep    *replica      // the chosen replica (it may be removed while the request runs)
	known  bool          // the session had a home before this request
	home   int           // its home after the decision
	ticket *place.Ticket // the adaptive policy's record of this request
	policy string        // the policy that decided
	waited time.Duration // held at the proxy before this decision (placeOrHold)
}

// place decides and increments the chosen replica's in-flight count in one
// critical section, so that a burst cannot herd onto one replica. Replicas
// in skip are treated as unavailable (a retry).
func (p *Proxy) place(key identity.SessionKey, pinned bool, pin int, skip []int, bodyBytes int, waited time.Duration) placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	if !p.ticking && now.Sub(p.lastRefresh) >= p.cfg.BalancerInterval {
		p.refreshBalancers(now) // no Run loop (tests): refresh on demand
	}
	var s *place.Session
	if key.Key != "" {
		s = p.sessions.Get(key.Key, now)
	}
	reps := p.replicaList()
	snap := make([]place.ReplicaView, len(reps))
	for i, r := range reps {
		snap[i] = r.view(p.sessions.Active(r.rank), now, staleAfter*p.cfg.ScrapeInterval, p.cfg.RampUp)
		if slices.Contains(skip, r.rank) {
			snap[i].Healthy = false
		}
	}
	sv := place.SessionView{Key: key.Key, Pinned: pinned, Pin: pin}
	if s != nil && s.Home() >= 0 { // a home whose cache was wiped is no home (cacheWiped)
		sv.Known, sv.Home = true, s.Home()
	}
	p.adaptiveView(snap, &sv, bodyBytes, waited, now)
	d := place.Pick(snap, sv, p.placeConfig(), p.rng)
	pl := placement{d: d, known: s != nil, policy: p.policy}
	if d.Rank < 0 {
		return pl
	}
	r := p.lookup(d.Rank)
	pl.rep = r
	r.inflight.Add(1)
	r.sentSince++
	switch {
	case key.Key == "":
	case s == nil:
		s = p.sessions.Insert(key.Key, d.Rank, now)
		if key.Subagent && (key.Agent == "" || !p.cfg.SubagentsWithParent) {
			p.sessions.MarkSubagent(s)
		}
	case s.Home() < 0 || d.Reason == place.ReasonFailover || d.Reason == place.ReasonMove:
		p.sessions.Rehome(s, d.Rank)
	}
	if s != nil {
		pl.home = s.Home()
	}
	pl.ticket = p.route.Begin(key.Key, bodyBytes, d.Rank, d.Reason, now)
	return pl
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	m, _ := json.Marshal(msg)
	fmt.Fprintf(w, `{"error":{"message":%s,"type":"warden_error","code":%d}}`+"\n", m, code)
}

// refreshBalancers takes a new sample of every replica's load for the
// vLLM-style balancers. The caller holds p.mu.
func (p *Proxy) refreshBalancers(now time.Time) {
	for _, r := range p.replicaList() {
		r.refreshBalancer()
	}
	p.lastRefresh = now
}

// tickBalancers refreshes the balancer view every BalancerInterval until ctx
// ends, as vLLM's coordinator publishes engine stats on a fixed period: a
// decision sees the load as of the last tick plus what was sent since, never
// the exact load of its own instant (which would make `off` accidentally
// sticky: a closed-loop session's own replica is the one that just went idle).
func (p *Proxy) tickBalancers(ctx context.Context) {
	p.mu.Lock()
	p.ticking = true
	p.mu.Unlock()
	t := time.NewTicker(p.cfg.BalancerInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.ticking = false
			p.mu.Unlock()
			return
		case <-t.C:
			p.mu.Lock()
			p.refreshBalancers(p.clock())
			p.mu.Unlock()
		}
	}
}

// placeConfig is the policy and its knobs as place.Pick takes them. Call with p.mu
// held (the policy switches at run time).
func (p *Proxy) placeConfig() place.Config {
	c := place.Config{Policy: p.policy, SpillThreshold: p.cfg.SpillThreshold, MoveCooldown: p.cfg.MoveCooldown, Fill: p.cfg.KVFill}
	switch {
	case p.cfg.AdmitWait < 0:
		c.AdmitWait = -1
	case p.cfg.AdmitWait > 0:
		c.AdmitWait = p.cfg.AdmitWait.Seconds()
	}
	return c
}

func (c Config) cooldown() int { return place.Config{MoveCooldown: c.MoveCooldown}.Cooldown() }

func (c Config) fill() float64 { return place.Config{Fill: c.KVFill}.FillFraction() }
