package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lmwarden/warden/internal/journal"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/schema"
)

// Router is the router's settings as the command line gives them, the same
// for `warden serve` (engines it launched) and `warden route` (engines that
// were already running): where it listens, how it places conversations and
// who may use its admin endpoints.
type Router struct {
	Host                  string
	Port                  int
	Policy                string
	Affinity              bool // false: --policy off
	BalancerInterval      time.Duration
	ScrapeInterval        time.Duration // the engines' /metrics and /health poll
	SpillThreshold        int
	AdmitWait             time.Duration
	MoveCooldown          int
	Subagents             string // own, parent or near
	FairShare             bool
	QueueMaxWait          time.Duration
	QueueMaxLen           int
	RampUp                time.Duration
	KVFill                float64
	SessionHeaders        []string
	KeepBillingHeader     bool
	StrictModel           bool
	AdminToken, APIKey    string
	MaxBodyBytes          string // a size such as 32MiB
	ResponseHeaderTimeout time.Duration
	StreamIdleTimeout     time.Duration
	MaxReplays            int
	DecisionLog           string
	DecisionLogMaxMB      int
	DrainTimeout          time.Duration
}

// configs validates the router's settings into the core's and the HTTP
// data plane's configs for the served model name and returns the listen
// address. The settings' own checks are router.Config.Validate's and
// proxy.Config.Validate's; only what the command line spells differently
// is read here.
func (r Router) configs(servedName string) (router.Config, proxy.Config, string, error) {
	var none router.Config
	if err := checkHost(r.Host); err != nil {
		return none, proxy.Config{}, "", err
	}
	port := r.Port
	if port < 1 || port > 65535 {
		return none, proxy.Config{}, "", fmt.Errorf("--port %d is not a TCP port", port)
	}
	if v := r.Subagents; v != "own" && v != "parent" && v != "near" {
		return none, proxy.Config{}, "", fmt.Errorf("--subagents must be own, parent or near, got %q", v)
	}
	maxBody, err := humanize.ParseBytes(r.MaxBodyBytes)
	if err != nil || maxBody == 0 || maxBody > 1<<40 {
		return none, proxy.Config{}, "", fmt.Errorf("--max-body-bytes %q is not a size such as 32MiB", r.MaxBodyBytes)
	}
	policy := r.Policy
	if !r.Affinity {
		policy = place.PolicyOff
	}
	cc := router.Config{
		ServedModel: servedName, StrictModel: r.StrictModel, Policy: policy, SpillThreshold: r.SpillThreshold,
		SessionHeaders: r.SessionHeaders, BalancerInterval: r.BalancerInterval, ScrapeInterval: r.ScrapeInterval,
		AdmitWait: r.AdmitWait, MoveCooldown: r.MoveCooldown, KVFill: r.KVFill,
		RampUp: r.RampUp, SubagentsWithParent: r.Subagents == "parent", SubagentsNear: r.Subagents == "near",
		FairShare: r.FairShare, QueueMaxWait: r.QueueMaxWait, QueueMaxLen: r.QueueMaxLen,
		DecisionLog: r.DecisionLog, DecisionLogMaxMB: r.DecisionLogMaxMB, MaxBodyBytes: int64(maxBody),
	}
	pc := proxy.Config{
		KeepBillingHeader: r.KeepBillingHeader, AdminToken: r.AdminToken, APIKey: r.APIKey,
		ResponseHeaderTimeout: r.ResponseHeaderTimeout, StreamIdleTimeout: r.StreamIdleTimeout, MaxReplays: r.MaxReplays,
	}
	if err := cc.Validate(); err != nil {
		return none, proxy.Config{}, "", err
	}
	if err := pc.Validate(); err != nil {
		return none, proxy.Config{}, "", err
	}
	return cc, pc, net.JoinHostPort(r.Host, strconv.Itoa(port)), nil
}

// newHTTP builds the router core over the backends and the HTTP data plane
// in front of it.
func newHTTP(cc router.Config, pc proxy.Config, backends []router.Backend) (*router.Core, *proxy.Proxy, error) {
	core, err := router.New(cc, backends)
	if err != nil {
		return nil, nil, err
	}
	px, err := proxy.New(core, pc)
	if err != nil {
		return nil, nil, err
	}
	return core, px, nil
}

// startHTTP serves h on ln and returns the server and the channel that gets
// Serve's result. Idle keep-alive connections are closed after five minutes
// (agent farms open many); a slow client gets 30 s to send its headers.
func startHTTP(ln net.Listener, h http.Handler, log *slog.Logger) (*http.Server, <-chan error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return srv, served
}

// newLogger is the one logger of a warden run: text on stderr, each line
// with its priority when stderr is the systemd journal.
func newLogger() *slog.Logger {
	return slog.New(journal.Handler(os.Stderr, slog.LevelInfo, os.Getenv))
}

// newRegistry is the run's one Prometheus registry (the proxy adds its own
// metrics and the panel's collector to it).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// drain blocks until ctx ends (SIGINT/SIGTERM) or the server fails, then
// stops accepting, lets in-flight requests finish for up to grace (saying
// how many, and that a second Ctrl-C stops waiting: drainHTTP), scrapes the
// engines once more and returns the final status for the summary.
func drain(ctx context.Context, stopSignals func(), srv *http.Server, served <-chan error,
	core *router.Core, grace time.Duration, log *slog.Logger) schema.Status {
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("http server stopped", "err", err)
	}
	drainHTTP(srv, grace, stopSignals, func() int { return core.Status().InFlight }, log)
	if err := core.CloseDecisionLog(); err != nil {
		log.Warn("the decision log was not written completely", "error", err)
	}
	core.CheckNow(context.Background())
	return core.Status()
}

// awaitTruth blocks until the core has caught up from the engines' KV
// events (their replay applied; at most router.CatchUpLimit after Run
// started) or ctx ends: a data plane claims readiness only then, so a
// restarted picker or router finds the homes the others know.
func awaitTruth(ctx context.Context, core *router.Core) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !core.CaughtUp() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reloadSessions loads the session table saved at path (none there yet:
// nothing to load) and logs what came back.
func reloadSessions(core *router.Core, path string, log *slog.Logger) error {
	res, err := core.LoadSessions(path)
	if err != nil {
		return err
	}
	if !res.SavedAt.IsZero() {
		log.Info("session table reloaded", "path", path, "saved_at", res.SavedAt.Format(time.RFC3339),
			"restored", res.Restored, "expired", res.Expired, "on_unknown_replicas", res.Unknown)
	}
	return nil
}

// saveSessions saves the session table at path, logging the outcome.
func saveSessions(core *router.Core, path string, log *slog.Logger) {
	if n, err := core.SaveSessions(path); err != nil {
		log.Error("the session table was not saved", "path", path, "error", err)
	} else {
		log.Info("session table saved", "path", path, "sessions", n)
	}
}
