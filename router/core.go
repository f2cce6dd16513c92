package router

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

	"github.com/lmwarden/warden/router/modelname"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/schema"
)

// The defaults of Config's fields, stated once. The command layer gives
// its flags these values, and a zero field means the same, except RampUp:
// its zero is "at once" (DefaultRampUp is the flag's value only).
const (
	DefaultScrapeInterval   = time.Second
	DefaultBalancerInterval = 100 * time.Millisecond
	DefaultRampUp           = 30 * time.Second
	DefaultFailCooldown     = 10 * time.Second
	DefaultSessionTTL       = time.Hour
	DefaultMaxSessions      = place.DefaultMaxSessions
	DefaultDecisionLogMaxMB = 100
	// DefaultMaxBodyBytes bounds the request body a data plane reads to
	// identify a conversation (agent conversations reach a few MB).
	DefaultMaxBodyBytes = 32 << 20
	// DefaultFairShare: the admission queue is on (the flag's value; see
	// Config.FairShare and docs/routing.md's measurement).
	DefaultFairShare    = true
	DefaultQueueMaxWait = 30 * time.Second
	DefaultQueueMaxLen  = 1024
)

// Config configures a Core: how conversations are identified and placed,
// how the engines are watched and what is recorded of each request. Each
// field says what its zero value means; Validate is the one check of the
// values a user gives.
type Config struct {
	// ServedModel is the one model name the replicas answer to, reported
	// in the status; "" = not configured (the data plane asks a replica).
	// Every other name a request gives is mapped to it (router/modelname).
	ServedModel string
	// StrictModel refuses a model name other than ServedModel (the data
	// plane answers 404, like vLLM) instead of mapping it to the served one.
	StrictModel bool
	// MaxBodyBytes bounds the request body a data plane reads to identify
	// a conversation; a larger one is answered 413. 0 = DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Policy is the placement policy (place.Policies()); "" = adaptive.
	Policy string
	// SpillThreshold is the in-flight count above which a sticky turn
	// spills; 0 = max(1, max_num_seqs/4) per replica.
	SpillThreshold int
	// AdmitWait is adaptive's longest hold of a new conversation without
	// KV room; 0 = five mean turn times, < 0 = never hold.
	AdmitWait time.Duration
	// MoveCooldown is the turns a moved conversation stays put; 0 =
	// place.DefaultMoveCooldown.
	MoveCooldown int
	// KVFill is the fraction of each replica's KV capacity that adaptive
	// plans working sets into, in (0, 4]; 0 = place.DefaultFill.
	KVFill float64
	// SessionHeaders are extra request headers that carry a session id.
	SessionHeaders []string
	// SubagentsWithParent places a subagent's requests (the parent's
	// session id plus an agent id) on its parent's session; false: each
	// subagent is a conversation of its own, placed by load
	// (identity.SessionKey.Conversation).
	SubagentsWithParent bool
	// SubagentsNear (with SubagentsWithParent false) places a new subagent
	// conversation on its parent's replica while that one is under its
	// spill threshold (place.Config.SubagentsNear).
	SubagentsNear bool
	// FairShare puts the admission queue in front of placement (admit.go):
	// requests go to the engines while a replica can start them at once,
	// the rest wait in a fair order across agent trees; false: every
	// request is placed at once (the engines queue first come first
	// served). Its flag's default is DefaultFairShare.
	FairShare bool
	// QueueMaxWait bounds a request's wait in the admission queue, and
	// QueueMaxLen the queue; past either the client is told to retry.
	// 0 = DefaultQueueMaxWait, DefaultQueueMaxLen.
	QueueMaxWait time.Duration
	QueueMaxLen  int
	// MaxSessions bounds the session table (least recently used beyond);
	// 0 = DefaultMaxSessions.
	MaxSessions int
	// SessionTTL is how long an idle session is kept; 0 = DefaultSessionTTL.
	SessionTTL time.Duration
	// ScrapeInterval is the period of the engines' /metrics and /health
	// poll; 0 = DefaultScrapeInterval.
	ScrapeInterval time.Duration
	// BalancerInterval is the refresh period of the "off" balancers'
	// engine statistics; 0 = DefaultBalancerInterval.
	BalancerInterval time.Duration
	// FailCooldown is the least time a replica stays out of rotation after
	// engine.ReqFailsDown failed requests; 0 = DefaultFailCooldown.
	FailCooldown time.Duration
	// RampUp is how long a replica that came back into the rotation takes
	// to reach its full share of new conversations; 0 = at once.
	RampUp time.Duration
	// DecisionLog is a file that gets one JSON line per routed request
	// (decisionlog.go); "" = off. It is rotated at DecisionLogMaxMB
	// megabytes (0 = DefaultDecisionLogMaxMB), keeping three old files.
	DecisionLog      string
	DecisionLogMaxMB int
	// Engines is how `warden serve` started the engines, reported in the
	// status; nil when the warden did not start them.
	Engines *schema.EngineSetup

	Logger   *slog.Logger         // nil = slog.Default()
	Registry *prometheus.Registry // nil = a new registry
	// Clock is the one clock the core reads time from (nil = time.Now):
	// session TTL, series buckets, balancer refresh, times to first byte,
	// turn times, failure cooldowns. Only I/O deadlines run on real timers.
	Clock func() time.Time
	Seed  uint64 // tie-break randomness; 0 = random
}

// Validate checks the settings a user gives, each named by the warden flag
// that sets it. Zero values are valid and mean what their field says. It is
// the one place they are checked: the commands call it before anything
// starts, New again.
func (c Config) Validate() error {
	if c.Policy != "" {
		if err := place.ValidPolicy(c.Policy); err != nil {
			return err
		}
	}
	switch {
	case c.SpillThreshold < 0:
		return fmt.Errorf("--spill-threshold must be >= 0 (0 means auto), got %d", c.SpillThreshold)
	case c.QueueMaxWait < 0:
		return fmt.Errorf("--queue-max-wait must be >= 0 (0 means %s), got %s", DefaultQueueMaxWait, c.QueueMaxWait)
	case c.QueueMaxLen < 0:
		return fmt.Errorf("--queue-max-len must be >= 0 (0 means %d), got %d", DefaultQueueMaxLen, c.QueueMaxLen)
	case c.MoveCooldown < 0:
		return fmt.Errorf("--move-cooldown must be >= 0 turns (0 means auto = %d), got %d", place.DefaultMoveCooldown, c.MoveCooldown)
	case c.KVFill < 0 || c.KVFill > 4:
		return fmt.Errorf("--kv-fill must be a fraction of the KV cache in (0, 4] (0 means auto = %v), got %v", place.DefaultFill, c.KVFill)
	case c.MaxSessions < 0:
		return fmt.Errorf("--max-sessions must be >= 0 (0 means %d), got %d", DefaultMaxSessions, c.MaxSessions)
	case c.SessionTTL < 0:
		return fmt.Errorf("--session-ttl must be >= 0 (0 means %v), got %v", DefaultSessionTTL, c.SessionTTL)
	case c.ScrapeInterval < 0:
		return fmt.Errorf("--scrape-interval must be >= 0 (0 means %v), got %v", DefaultScrapeInterval, c.ScrapeInterval)
	case c.BalancerInterval < 0:
		return fmt.Errorf("--balancer-interval must be >= 0 (0 means %v), got %v", DefaultBalancerInterval, c.BalancerInterval)
	case c.FailCooldown < 0:
		return fmt.Errorf("the fail cooldown must be >= 0 (0 means %v), got %v", DefaultFailCooldown, c.FailCooldown)
	case c.RampUp < 0:
		return fmt.Errorf("--ramp-up must be >= 0 (0: at once), got %v", c.RampUp)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("--max-body-bytes must be >= 0 (0 means %d MiB), got %d", DefaultMaxBodyBytes>>20, c.MaxBodyBytes)
	case c.DecisionLogMaxMB < 0:
		return fmt.Errorf("--decision-log-max-mb must be >= 0 (0 means %d), got %d", DefaultDecisionLogMaxMB, c.DecisionLogMaxMB)
	}
	return nil
}

// withDefaults returns c validated, with every zero field that has a
// default set to it.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Policy == "" {
		c.Policy = place.PolicyAdaptive
	}
	setDefault(&c.MaxSessions, DefaultMaxSessions)
	setDefault(&c.SessionTTL, DefaultSessionTTL)
	setDefault(&c.ScrapeInterval, DefaultScrapeInterval)
	setDefault(&c.BalancerInterval, DefaultBalancerInterval)
	setDefault(&c.FailCooldown, DefaultFailCooldown)
	setDefault(&c.DecisionLogMaxMB, DefaultDecisionLogMaxMB)
	setDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&c.QueueMaxWait, DefaultQueueMaxWait)
	setDefault(&c.QueueMaxLen, DefaultQueueMaxLen)
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
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// placeConfig is the policy and its knobs as place.Pick takes them (the
// Placer's; the policy switches at run time: SetPolicy).
func (c Config) placeConfig() place.Config {
	pc := place.Config{Policy: c.Policy, SpillThreshold: c.SpillThreshold, MoveCooldown: c.MoveCooldown, Fill: c.KVFill,
		SubagentsNear: c.SubagentsNear && !c.SubagentsWithParent}
	switch {
	case c.AdmitWait < 0:
		pc.AdmitWait = -1
	case c.AdmitWait > 0:
		pc.AdmitWait = c.AdmitWait.Seconds()
	}
	return pc
}

// staleAfter scrape intervals without a good scrape make a replica's
// metrics stale: it counts as busy for new placements.
const staleAfter = 3

// checkTimeout bounds one health check or scrape request.
const checkTimeout = 2 * time.Second

// Core is what routing needs and no transport: the replica set and its
// membership, the engines' view (scrape, health, learned limits),
// placement, the accounting of a finished request (tokens, cached, time to
// first byte, decision log, stats, metrics) and the status the panel reads.
// A data plane (proxy: HTTP; epp: a gateway's external processor)
// identifies a request, asks Place, carries the bytes and hands the outcome
// to Finish. Create it with New.
//
// Locks: placement is the Placer's, under its own lock; dyn.mu serialises
// changes of the replica set. Lock order: dyn.mu before the Placer's lock
// (adding and removing replicas, saving the session table), the Placer's
// before a replica's mu (a decision reads every replica's view under it);
// never the other way round. engine.Health has its own lock, taken under
// any of them and taking none; peak.mu and series.mu take none either.
type Core struct {
	cfg          Config
	log          *slog.Logger
	clock        func() time.Time
	since        time.Time
	starting     atomic.Bool                // engines still starting (SetStarting)
	set          atomic.Pointer[replicaSet] // the replicas, read without a lock (membership.go)
	dyn          dynState                   // adding and removing replicas (membership.go)
	placer       *place.Placer[*Replica]    // placement: decisions, sessions, held requests
	client       *http.Client               // health, scrape and the engines' admin endpoints
	metrics      *metrics
	series       *series
	peak         peakState      // the worst KV overcommit (status.go)
	names        *modelname.Map // the model names requests give, mapped to ServedModel
	decisions    *decisionLog   // --decision-log; nil = off
	admit        *admission     // the admission queue (admit.go); nil = FairShare off
	feeds        feeds          // the engines' KV-event subscribers (truth.go)
	catchUp      catchUp        // the feeds' first catch-up, which readiness waits for (truth.go)
	truthMetrics *truthMetrics
	timeScale    atomic.Uint64 // the engines' time scale as float64 bits (noteTimeScale); 0 = not said
}

// Placement is one decision of the Core's Placer.
type Placement = place.Placement[*Replica]

// New builds a core over the backends (at least one, unique ranks).
func New(cfg Config, backends []Backend) (*Core, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(backends) == 0 {
		return nil, errors.New("router: no backends")
	}
	c := &Core{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, names: modelname.New(cfg.ServedModel, cfg.StrictModel, cfg.Logger)}
	c.since = c.clock()
	c.placer = place.NewPlacer[*Replica](place.PlacerConfig{Config: cfg.placeConfig(),
		SessionTTL: cfg.SessionTTL, MaxSessions: cfg.MaxSessions, BalancerInterval: cfg.BalancerInterval,
		Clock: cfg.Clock, Rand: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))})
	c.series = newSeries(10*time.Second, time.Hour)
	c.client = &http.Client{Transport: NewTransport()}
	byRank := map[int]bool{}
	var list []*Replica
	for _, b := range backends {
		if byRank[b.Rank] {
			return nil, fmt.Errorf("router: rank %d given twice", b.Rank)
		}
		r, err := newReplica(b, &c.cfg)
		if err != nil {
			return nil, fmt.Errorf("router: %w", err)
		}
		byRank[b.Rank] = true
		list = append(list, r)
	}
	c.publish(list)
	if cfg.FairShare {
		c.admit = newAdmission(cfg.QueueMaxWait, cfg.QueueMaxLen, cfg.Clock, c.Replicas)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("router: metrics: %w", err)
	}
	c.metrics = m
	if c.truthMetrics, err = newTruthMetrics(cfg.Registry); err != nil {
		return nil, fmt.Errorf("router: metrics: %w", err)
	}
	if err := cfg.Registry.Register(panel.NewCollector(c.Status)); err != nil {
		return nil, fmt.Errorf("router: panel collector: %w", err)
	}
	if err := c.startDecisionLog(); err != nil {
		return nil, err
	}
	return c, nil
}

// NewTransport is the transport to engines: bounded dials, many kept-alive
// connections, no compression (the usage tap reads plain bytes).
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// Config returns the core's settings with their defaults applied.
func (c *Core) Config() Config { return c.cfg }

// Logger is the core's logger.
func (c *Core) Logger() *slog.Logger { return c.log }

// Now reads the core's clock.
func (c *Core) Now() time.Time { return c.clock() }

// Registry is the Prometheus registry the core's metrics are in.
func (c *Core) Registry() *prometheus.Registry { return c.cfg.Registry }

// Client is the HTTP client the core talks to the engines' own endpoints
// with (health, metrics, admin).
func (c *Core) Client() *http.Client { return c.client }

// SetStarting marks the start of the engines as under way (true) or over
// (false); Ready is false while it is under way, even though the replicas
// already loaded take requests.
func (c *Core) SetStarting(on bool) { c.starting.Store(on) }

// Starting reports whether the engines' start is under way.
func (c *Core) Starting() bool { return c.starting.Load() }

// Ready reports whether the start is over, a replica is in rotation, and
// the engines' truth has been caught up (caughtUp: every answering replica
// whose engine publishes KV events has replayed its history, or
// CatchUpLimit has passed since Run started the feeds).
func (c *Core) Ready() bool {
	if c.starting.Load() {
		return false
	}
	for _, r := range c.Replicas() {
		if r.Healthy() {
			return c.caughtUp()
		}
	}
	return false
}

// SetReplicaState records the launcher's view of a replica (its OnState
// callback). up=false takes it out of rotation at once.
func (c *Core) SetReplicaState(rank int, up bool, state, reason string) {
	r := c.Lookup(rank)
	if r == nil {
		c.log.Warn("state for an unknown replica", "replica", rank, "state", state)
		return
	}
	r.health.Launcher(up, state, reason, c.clock())
}

// NoteRestart counts a restart of the replica's engine; its counters start
// from zero again.
func (c *Core) NoteRestart(rank int) {
	r := c.Lookup(rank)
	if r == nil {
		return
	}
	r.mu.Lock()
	r.restarts++
	r.eng.Restarted()
	r.mu.Unlock()
	r.maxModelLen.Store(0) // learned again: the new engine may fit another context
	r.kv.ledger.Reset(false, r.kv.ledger.Live())
	c.cacheWiped(rank, "the engine restarted")
}

// SetReplicaCrash records how the replica's engine last went down and
// where its restarts stand (the launcher's OnCrash), for the status.
func (c *Core) SetReplicaCrash(rank int, crash schema.Crash) {
	r := c.Lookup(rank)
	if r == nil {
		return
	}
	r.mu.Lock()
	r.lastCrash = &crash
	r.mu.Unlock()
}

// cacheWiped forgets what the placement believed the replica's prefix
// cache held, after a restart, a counter reset or /reset_prefix_cache: its
// conversations lose their home there and are placed by load on their next
// turn, and its shared-prefix and residency estimates start afresh.
func (c *Core) cacheWiped(rank int, why string) {
	n := c.placer.Wiped(rank)
	if r := c.Lookup(rank); r != nil {
		r.log.Info("prefix cache emptied: its conversations will be placed by load", "why", why, "conversations", n)
	}
}

// Placer is the core's one owner of placement state, for tools and tests
// that drive placement directly (benchmarks, the balancer tests); data
// planes place through Place and Finish.
func (c *Core) Placer() *place.Placer[*Replica] { return c.placer }
