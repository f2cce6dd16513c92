package main

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
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/proxy/panel"
	"github.com/lmwarden/warden/proxy/place"
)

// envVars names a flag's WARDEN_* environment variable.
func envVars(s string) []string { return []string{"WARDEN_" + s} }

// routerFlags are the flags of the router in front of the engines, the same
// for `warden serve` (engines it launched) and `warden route` (engines that
// were already running): where it listens, how it places conversations and
// who may use its admin endpoints.
func routerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "host", Value: "127.0.0.1", EnvVars: envVars("HOST"),
			Usage: "address the warden listens on; 0.0.0.0 to serve other hosts"},
		&cli.IntFlag{Name: "port", Value: 8000, EnvVars: envVars("PORT"),
			Usage: "the one public port clients use (OpenAI and Anthropic APIs, status page, /metrics)"},
		&cli.StringFlag{Name: "policy", Value: "adaptive", EnvVars: envVars("POLICY"),
			Usage: "routing policy: adaptive (sticky, plus KV-aware admission of new conversations and cost-based moves), sticky (keep a conversation on its replica), off (vLLM-like shortest queue), hash, ..."},
		&cli.BoolFlag{Name: "affinity", Value: true, EnvVars: envVars("AFFINITY"),
			Usage: "session affinity; --affinity=false is --policy off"},
		&cli.DurationFlag{Name: "balancer-interval", Value: 100 * time.Millisecond, EnvVars: envVars("BALANCER_INTERVAL"),
			Usage: "period of the load sample the vLLM-style balancers (off, off-v2) decide on, as vLLM's coordinator publishes engine stats"},
		&cli.IntFlag{Name: "spill-threshold", EnvVars: envVars("SPILL_THRESHOLD"),
			Usage: "in-flight requests on a replica above which a sticky turn spills elsewhere (0: auto = max(1, the replica's max_num_seqs/4))"},
		&cli.DurationFlag{Name: "admit-wait", EnvVars: envVars("ADMIT_WAIT"),
			Usage: "adaptive: longest a new conversation waits at the warden when no replica has KV room for it (0: auto, 5 mean turn times; negative, e.g. -1s: never wait)"},
		&cli.IntFlag{Name: "move-cooldown", EnvVars: envVars("MOVE_COOLDOWN"),
			Usage: "adaptive: turns a conversation moved off an overfull replica stays on its new one (0: auto = 3)"},
		&cli.StringFlag{Name: "subagents", Value: "own", EnvVars: envVars("SUBAGENTS"),
			Usage: "own: a subagent (Claude Code's x-claude-code-agent-id, a Codex child thread) is a conversation of its own, placed by load; parent: it goes where its parent's session is"},
		&cli.DurationFlag{Name: "ramp-up", Value: 30 * time.Second, EnvVars: envVars("RAMP_UP"),
			Usage: "how long a replica that comes back into rotation (restart, recovery, added) takes to reach its full share of new conversations (0: at once)"},
		&cli.Float64Flag{Name: "kv-fill", EnvVars: envVars("KV_FILL"),
			Usage: "adaptive: fraction of each replica's KV cache the conversations' working sets are planned into (0: auto = 1.0; below 1 keeps headroom, above 1 overcommits)"},
		&cli.StringSliceFlag{Name: "session-header", EnvVars: envVars("SESSION_HEADER"),
			Usage: "extra request header(s) that carry a session id (checked after the known agent headers)"},
		&cli.BoolFlag{Name: "keep-billing-header", EnvVars: envVars("KEEP_BILLING_HEADER"),
			Usage: "forward Claude Code's per-conversation billing system block (removed by default: it defeats prefix sharing)"},
		&cli.BoolFlag{Name: "strict-model", EnvVars: envVars("STRICT_MODEL"),
			Usage: "answer 404 (like vLLM) to a request for a model name other than the served one, instead of serving every name with the one model"},
		&cli.StringFlag{Name: "admin-token", EnvVars: envVars("ADMIN_TOKEN"),
			Usage: "bearer token for admin endpoints from non-loopback callers (policy switch, cache reset, replicas)"},
		&cli.StringFlag{Name: "api-key", EnvVars: envVars("API_KEY"),
			Usage: "require this key from clients on /v1/* (Authorization: Bearer KEY or x-api-key: KEY; 401 otherwise); never logged, not forwarded to engines"},
		&cli.StringFlag{Name: "max-body-bytes", Value: "32MiB", EnvVars: envVars("MAX_BODY_BYTES"),
			Usage: "largest request body accepted (e.g. 32MiB); larger ones get 413 (agent conversations reach a few MB)"},
		&cli.DurationFlag{Name: "response-header-timeout", Value: 10 * time.Minute, EnvVars: envVars("RESPONSE_HEADER_TIMEOUT"),
			Usage: "how long to wait for an engine's response headers (a non-streaming answer sends them when complete); then 504 naming the replica"},
		&cli.StringFlag{Name: "decision-log", EnvVars: envVars("DECISION_LOG"),
			Usage: "write one JSON line per routed request to this file (route reason, replica, warden queue wait, tokens, TTFB; docs/operations.md); off by default"},
		&cli.IntFlag{Name: "decision-log-max-mb", Value: 100, EnvVars: envVars("DECISION_LOG_MAX_MB"),
			Usage: "rotate the --decision-log file at this size in megabytes, keeping three old files"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: envVars("DRAIN_TIMEOUT"),
			Usage: "on SIGINT/SIGTERM, how long in-flight requests may finish before the warden stops"},
	}
}

// routerConfigFrom validates the router flags into a proxy.Config for the
// served model name and returns the listen address.
func routerConfigFrom(c *cli.Context, servedName string) (proxy.Config, string, error) {
	port := c.Int("port")
	if port < 1 || port > 65535 {
		return proxy.Config{}, "", fmt.Errorf("--port %d is not a TCP port", port)
	}
	// Zero is a user's mistake for these two (their defaults are not zero);
	// in proxy.Config zero means the default, so they are checked here.
	if c.Duration("balancer-interval") <= 0 {
		return proxy.Config{}, "", fmt.Errorf("--balancer-interval must be positive, got %v", c.Duration("balancer-interval"))
	}
	if v := c.String("subagents"); v != "own" && v != "parent" {
		return proxy.Config{}, "", fmt.Errorf("--subagents must be own or parent, got %q", v)
	}
	if c.Duration("ramp-up") < 0 {
		return proxy.Config{}, "", fmt.Errorf("--ramp-up must be >= 0 (0: at once), got %v", c.Duration("ramp-up"))
	}
	if c.Duration("response-header-timeout") <= 0 {
		return proxy.Config{}, "", fmt.Errorf("--response-header-timeout must be positive, got %v", c.Duration("response-header-timeout"))
	}
	if c.Int("decision-log-max-mb") < 1 {
		return proxy.Config{}, "", fmt.Errorf("--decision-log-max-mb must be >= 1, got %d", c.Int("decision-log-max-mb"))
	}
	maxBody, err := humanize.ParseBytes(c.String("max-body-bytes"))
	if err != nil || maxBody == 0 || maxBody > 1<<40 {
		return proxy.Config{}, "", fmt.Errorf("--max-body-bytes %q is not a size such as 32MiB", c.String("max-body-bytes"))
	}
	policy := c.String("policy")
	if !c.Bool("affinity") {
		policy = place.PolicyOff
	}
	cfg := proxy.Config{
		ServedModel: servedName, Policy: policy, SpillThreshold: c.Int("spill-threshold"),
		SessionHeaders: c.StringSlice("session-header"), KeepBillingHeader: c.Bool("keep-billing-header"),
		AdminToken: c.String("admin-token"), APIKey: c.String("api-key"),
		ResponseHeaderTimeout: c.Duration("response-header-timeout"), StrictModel: c.Bool("strict-model"),
		BalancerInterval: c.Duration("balancer-interval"), MaxBodyBytes: int64(maxBody),
		AdmitWait: c.Duration("admit-wait"), MoveCooldown: c.Int("move-cooldown"), KVFill: c.Float64("kv-fill"),
		RampUp: c.Duration("ramp-up"), SubagentsWithParent: c.String("subagents") == "parent",
		DecisionLog: c.String("decision-log"), DecisionLogMaxMB: c.Int("decision-log-max-mb"),
	}
	if cfg.RampUp == 0 {
		cfg.RampUp = -1 // at once (0 in proxy.Config is the default)
	}
	if err := cfg.Validate(); err != nil {
		return proxy.Config{}, "", err
	}
	return cfg, net.JoinHostPort(c.String("host"), strconv.Itoa(port)), nil
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
// stops accepting, lets in-flight requests finish for up to grace, scrapes
// the engines once more and returns the final status for the summary.
// stopSignals is called first, so a second Ctrl-C kills the warden the
// default way.
func drain(ctx context.Context, stopSignals func(), srv *http.Server, served <-chan error,
	px *proxy.Proxy, grace time.Duration, log *slog.Logger) panel.Status {
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", "grace", grace)
	case err := <-served:
		log.Error("http server stopped", "err", err)
	}
	stopSignals()
	shutdownHTTP(srv, grace)
	if err := px.CloseDecisionLog(); err != nil {
		log.Warn("the decision log was not written completely", "error", err)
	}
	px.CheckNow(context.Background())
	return px.Status()
}
