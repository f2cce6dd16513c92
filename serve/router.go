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

	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/proxy/panel"
	"github.com/lmwarden/warden/proxy/place"
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
	DecisionLog           string
	DecisionLogMaxMB      int
	DrainTimeout          time.Duration
}

// proxyConfig validates the router's settings into a proxy.Config for the
// served model name and returns the listen address.
func (r Router) proxyConfig(servedName string) (proxy.Config, string, error) {
	if err := checkHost(r.Host); err != nil {
		return proxy.Config{}, "", err
	}
	port := r.Port
	if port < 1 || port > 65535 {
		return proxy.Config{}, "", fmt.Errorf("--port %d is not a TCP port", port)
	}
	// Zero is a user's mistake for these two (their defaults are not zero);
	// in proxy.Config zero means the default, so they are checked here.
	if r.ScrapeInterval <= 0 {
		return proxy.Config{}, "", fmt.Errorf("--scrape-interval must be positive, got %v", r.ScrapeInterval)
	}
	if r.BalancerInterval <= 0 {
		return proxy.Config{}, "", fmt.Errorf("--balancer-interval must be positive, got %v", r.BalancerInterval)
	}
	if v := r.Subagents; v != "own" && v != "parent" {
		return proxy.Config{}, "", fmt.Errorf("--subagents must be own or parent, got %q", v)
	}
	if r.RampUp < 0 {
		return proxy.Config{}, "", fmt.Errorf("--ramp-up must be >= 0 (0: at once), got %v", r.RampUp)
	}
	if r.ResponseHeaderTimeout <= 0 {
		return proxy.Config{}, "", fmt.Errorf("--response-header-timeout must be positive, got %v", r.ResponseHeaderTimeout)
	}
	if r.DecisionLogMaxMB < 1 {
		return proxy.Config{}, "", fmt.Errorf("--decision-log-max-mb must be >= 1, got %d", r.DecisionLogMaxMB)
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
		ServedModel: servedName, Policy: policy, SpillThreshold: r.SpillThreshold,
		SessionHeaders: r.SessionHeaders, KeepBillingHeader: r.KeepBillingHeader,
		AdminToken: r.AdminToken, APIKey: r.APIKey,
		ResponseHeaderTimeout: r.ResponseHeaderTimeout, StrictModel: r.StrictModel,
		BalancerInterval: r.BalancerInterval, ScrapeInterval: r.ScrapeInterval, MaxBodyBytes: int64(maxBody),
		AdmitWait: r.AdmitWait, MoveCooldown: r.MoveCooldown, KVFill: r.KVFill,
		RampUp: r.RampUp, SubagentsWithParent: r.Subagents == "parent",
		DecisionLog: r.DecisionLog, DecisionLogMaxMB: r.DecisionLogMaxMB,
	}
	if cfg.RampUp == 0 {
		cfg.RampUp = -1 // at once (0 in proxy.Config is the default)
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

// newLogger is the one logger of a warden run: text on stderr.
func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
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
	drainHTTP(srv, grace, stopSignals, func() int { return px.Status().InFlight }, log)
	if err := px.CloseDecisionLog(); err != nil {
		log.Warn("the decision log was not written completely", "error", err)
	}
	px.CheckNow(context.Background())
	return px.Status()
}
