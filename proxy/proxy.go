package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/warden/proxy/compat"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
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

// checkTimeout bounds one health check or scrape request.
const checkTimeout = 2 * time.Second

// Proxy routes client requests to engine replicas: its configuration, its
// lifecycle (New, Run, the state the launcher reports) and the wiring of
// the parts. Create it with New.
//
// Locks: placement is the Placer's, under its own lock; dyn.mu serialises
// changes of the replica set. Lock order: dyn.mu before the Placer's lock
// (adding and removing replicas, saving the session table), the Placer's
// before a replica's mu (a decision reads every replica's view under it);
// never the other way round. engine.Health has its own lock, taken under
// any of them and taking none; peak.mu and series.mu take none either.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	clock     func() time.Time
	since     time.Time
	handler   http.Handler
	starting  atomic.Bool                // engines still starting: /health is 503 (SetStarting)
	set       atomic.Pointer[replicaSet] // the replicas, read without a lock (dynamic.go)
	dyn       dynState                   // adding and removing replicas (dynamic.go)
	placer    *place.Placer[*replica]    // placement: decisions, sessions, held requests
	clients   *compat.Clients            // model-name mapping and request adaptation
	client    *http.Client               // health and scrape
	metrics   *metrics
	series    *series
	peak      peakState    // the worst KV overcommit (status.go)
	decisions *decisionLog // --decision-log; nil = off
}

// placement is one decision of the Proxy's Placer.
type placement = place.Placement[*replica]

// New builds a proxy over the backends (at least one, unique ranks).
func New(cfg Config, backends []Backend) (*Proxy, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if len(backends) == 0 {
		return nil, errors.New("proxy: no backends")
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, clock: cfg.Clock}
	p.since = p.clock()
	p.placer = place.NewPlacer[*replica](place.PlacerConfig{Config: cfg.placeConfig(),
		SessionTTL: cfg.SessionTTL, MaxSessions: cfg.MaxSessions, BalancerInterval: cfg.BalancerInterval,
		Clock: cfg.Clock, Rand: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))})
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
		r, err := newReplica(b, &p.cfg)
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
	n := p.placer.Wiped(rank)
	if r := p.lookup(rank); r != nil {
		r.log.Info("prefix cache emptied: its conversations will be placed by load", "why", why, "conversations", n)
	}
}

// placeConfig is the policy and its knobs as place.Pick takes them (the
// Placer's; the policy switches at run time: SetPolicy).
func (c Config) placeConfig() place.Config {
	pc := place.Config{Policy: c.Policy, SpillThreshold: c.SpillThreshold, MoveCooldown: c.MoveCooldown, Fill: c.KVFill}
	switch {
	case c.AdmitWait < 0:
		pc.AdmitWait = -1
	case c.AdmitWait > 0:
		pc.AdmitWait = c.AdmitWait.Seconds()
	}
	return pc
}

func (c Config) cooldown() int { return place.Config{MoveCooldown: c.MoveCooldown}.Cooldown() }

func (c Config) fill() float64 { return place.Config{Fill: c.KVFill}.FillFraction() }
