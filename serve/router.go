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
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
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
	Subagents             string // own or parent
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

// proxyConfig validates the router's settings into a proxy.Config for the
// served model name and returns the listen address. The settings' own
// checks are proxy.Config.Validate's (and router.Config's); only what the
// command line spells differently is read here.
func (r Router) proxyConfig(servedName string) (proxy.Config, string, error) {
	if err := checkHost(r.Host); err != nil {
		return proxy.Config{}, "", err
	}
	port := r.Port
	if port < 1 || port > 65535 {
		return proxy.Config{}, "", fmt.Errorf("--port %d is not a TCP port", port)
	}
	if v := r.Subagents; v != "own" && v != "parent" {
		return proxy.Config{}, "", fmt.Errorf("--subagents must be own or parent, got %q", v)
	}
	maxBody, err := humanize.ParseBytes(r.MaxBodyBytes)
	if err != nil || maxBody == 0 || maxBody > 1<<40 {
		return proxy.Config{}, "", fmt.Errorf("--max-body-bytes %q is not a size such as 32MiB", r.MaxBodyBytes)
	}
	policy := r.Policy
	if !r.Affinity {
		policy = place.PolicyOff
	}
	cfg := proxy.Config{
		Config: router.Config{
			ServedModel: servedName, Policy: policy, SpillThreshold: r.SpillThreshold,
			SessionHeaders: r.SessionHeaders, BalancerInterval: r.BalancerInterval, ScrapeInterval: r.ScrapeInterval,
			AdmitWait: r.AdmitWait, MoveCooldown: r.MoveCooldown, KVFill: r.KVFill,
			RampUp: r.RampUp, SubagentsWithParent: r.Subagents == "parent",
			DecisionLog: r.DecisionLog, DecisionLogMaxMB: r.DecisionLogMaxMB,
		},
		KeepBillingHeader: r.KeepBillingHeader, AdminToken: r.AdminToken, APIKey: r.APIKey,
		ResponseHeaderTimeout: r.ResponseHeaderTimeout, StreamIdleTimeout: r.StreamIdleTimeout, MaxReplays: r.MaxReplays,
		StrictModel: r.StrictModel, MaxBodyBytes: int64(maxBody),
	}
	if err := cfg.Validate(); err != nil {
		return proxy.Config{}, "", err
	}
	return cfg, net.JoinHostPort(r.Host, strconv.Itoa(port)), nil
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
	px *proxy.Proxy, grace time.Duration, log *slog.Logger) panel.Status {
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("http server stopped", "err", err)
	}
	drainHTTP(srv, grace, stopSignals, func() int { return px.Core().Status().InFlight }, log)
	if err := px.Core().CloseDecisionLog(); err != nil {
		log.Warn("the decision log was not written completely", "error", err)
	}
	px.Core().CheckNow(context.Background())
	return px.Core().Status()
}
