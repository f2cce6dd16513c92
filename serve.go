package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/gpu"
	"github.com/lmwarden/warden/launch"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/proxy/panel"
)

// serveConfig is everything `warden serve` needs, validated once.
type serveConfig struct {
	Model, ServedName string
	DP, TP            int
	Host              string
	Port              int
	Addr              string // host:port to listen on
	GPUs              string
	MaxNumSeqs        int
	Engine, VLLMPath  string
	LogDir            string
	StartupTimeout    time.Duration
	DrainTimeout      time.Duration
	StopGrace         time.Duration
	Extra             []string
	Proxy             proxy.Config
}

func serveFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, EnvVars: envVars("MODEL"), Required: true,
			Usage: "model to serve (Hugging Face id or local path), the positional argument of vllm serve"},
		&cli.StringFlag{Name: "served-model-name", EnvVars: envVars("SERVED_MODEL_NAME"),
			Usage: "the one model name every replica answers to (default: --model)"},
		&cli.IntFlag{Name: "dp", Value: 1, EnvVars: envVars("DP"),
			Usage: "data-parallel size: number of engine replicas, each with its own prefix cache"},
		&cli.IntFlag{Name: "tp", Value: 1, EnvVars: envVars("TP"),
			Usage: "tensor-parallel size: GPUs per replica (dp x tp GPUs are needed)"},
		&cli.StringFlag{Name: "gpus", EnvVars: envVars("GPUS"),
			Usage: "comma-separated GPU indices or UUIDs to use (default: all visible, honouring CUDA_VISIBLE_DEVICES)"},
		&cli.IntFlag{Name: "max-num-seqs", EnvVars: envVars("MAX_NUM_SEQS"),
			Usage: "vLLM --max-num-seqs per replica (0: vLLM's own default for the GPU); the spill threshold derives from it"},
		&cli.StringFlag{Name: "engine", Value: "vllm", EnvVars: envVars("ENGINE"),
			Usage: "engine to launch: vllm, or sim (the built-in simulator; no GPU needed)"},
		&cli.StringFlag{Name: "vllm", Value: "vllm", EnvVars: envVars("VLLM"),
			Usage: "path of the vllm executable"},
		&cli.StringFlag{Name: "log-dir", EnvVars: envVars("LOG_DIR"),
			Usage: "directory for per-rank engine logs (default: $XDG_STATE_HOME/warden/runs/<time>)"},
		&cli.DurationFlag{Name: "startup-timeout", Value: 20 * time.Minute, EnvVars: envVars("STARTUP_TIMEOUT"),
			Usage: "give up when a replica is not healthy after this long (large models load for minutes)"},
		&cli.DurationFlag{Name: "stop-grace", Value: 20 * time.Second, EnvVars: envVars("STOP_GRACE"),
			Usage: "after SIGTERM to an engine's process group, how long before SIGKILL"},
	}, routerFlags()...)
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "launch one engine per data-parallel rank and a sticky router in front of them",
		ArgsUsage: "[-- extra vLLM serve arguments]",
		Description: "Finds the GPUs, starts one `vllm serve` per rank on its own loopback port, waits until all\n" +
			"are healthy, and serves the OpenAI and Anthropic APIs on --port, keeping each conversation on\n" +
			"the replica that has its prefix cached. Arguments after -- go to every engine verbatim.\n\n" +
			"Without GPUs: --engine sim runs the same job on the built-in simulator.",
		Flags:  serveFlags(),
		Action: func(c *cli.Context) error { return runServe(c) },
	}
}

// configFrom validates the flags into a serveConfig.
func configFrom(c *cli.Context) (serveConfig, error) {
	cfg := serveConfig{
		Model: c.String("model"), ServedName: c.String("served-model-name"),
		DP: c.Int("dp"), TP: c.Int("tp"), Host: c.String("host"), Port: c.Int("port"),
		GPUs: c.String("gpus"), MaxNumSeqs: c.Int("max-num-seqs"),
		Engine: c.String("engine"), VLLMPath: c.String("vllm"), LogDir: c.String("log-dir"),
		StartupTimeout: c.Duration("startup-timeout"), DrainTimeout: c.Duration("drain-timeout"),
		StopGrace: c.Duration("stop-grace"), Extra: c.Args().Slice(),
	}
	if cfg.ServedName == "" {
		cfg.ServedName = cfg.Model
	}
	switch {
	case cfg.DP < 1 || cfg.TP < 1:
		return cfg, fmt.Errorf("--dp and --tp must be at least 1 (got dp %d, tp %d)", cfg.DP, cfg.TP)
	case cfg.Engine != "vllm" && cfg.Engine != "sim":
		return cfg, fmt.Errorf("--engine must be vllm or sim, not %q", cfg.Engine)
	}
	if err := launch.CheckExtra(cfg.Extra); err != nil {
		return cfg, err
	}
	var err error
	if cfg.Proxy, cfg.Addr, err = routerConfigFrom(c, cfg.ServedName); err != nil {
		return cfg, err
	}
	if cfg.LogDir == "" {
		cfg.LogDir = defaultLogDir(time.Now())
	}
	return cfg, nil
}

// stateDir is where the warden keeps its files: $XDG_STATE_HOME/warden
// (~/.local/state/warden when unset).
func stateDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "warden")
}

// defaultLogDir is <stateDir>/runs/<time>.
func defaultLogDir(now time.Time) string {
	return filepath.Join(stateDir(), "runs", now.Format("20060102-150405"))
}

// engineGroups finds the GPUs for a vLLM run and returns one group per rank
// and the max_num_seqs to pass. The simulator needs no GPUs.
func engineGroups(ctx context.Context, cfg serveConfig, log *slog.Logger) ([][]string, int, error) {
	groups := make([][]string, cfg.DP)
	if cfg.Engine == "sim" {
		seqs := cfg.MaxNumSeqs
		if seqs == 0 {
			seqs = simDefaultMaxNumSeqs
		}
		return groups, seqs, nil
	}
	if _, err := launch.CheckVLLM(ctx, cfg.VLLMPath); err != nil {
		return nil, 0, err
	}
	devs, err := gpu.Discover(ctx)
	if err != nil {
		return nil, 0, err
	}
	devs, err = gpu.Select(devs, os.Getenv("CUDA_VISIBLE_DEVICES"), cfg.GPUs)
	if err != nil {
		return nil, 0, err
	}
	assigned, err := gpu.Assign(devs, cfg.DP, cfg.TP)
	if err != nil {
		return nil, 0, err
	}
	for _, w := range gpu.BusyWarnings(assigned) {
		log.Warn(w)
	}
	var used []gpu.Device
	for i, g := range assigned {
		groups[i] = gpu.VisibleDevices(g)
		used = append(used, g...)
	}
	seqs := cfg.MaxNumSeqs
	if seqs == 0 {
		seqs = launch.DefaultMaxNumSeqs(used)
	}
	return groups, seqs, nil
}

// simDefaultMaxNumSeqs is the reference rig's max_num_seqs, which the
// simulator's default profile models.
const simDefaultMaxNumSeqs = 32

// engineSpecs builds one launch spec and one proxy backend per rank.
func engineSpecs(cfg serveConfig, groups [][]string, seqs int) ([]launch.Spec, []proxy.Backend, error) {
	ports, err := launch.FreePorts(cfg.DP, "127.0.0.1")
	if err != nil {
		return nil, nil, fmt.Errorf("finding %d free loopback ports: %w", cfg.DP, err)
	}
	eng := launch.Engine{Kind: cfg.Engine, VLLMPath: cfg.VLLMPath, Model: cfg.Model,
		ServedName: cfg.ServedName, MaxNumSeqs: seqs, TP: cfg.TP, Extra: cfg.Extra}
	specs := make([]launch.Spec, cfg.DP)
	backends := make([]proxy.Backend, cfg.DP)
	for i := range specs {
		specs[i] = launch.Spec{Rank: i, Argv: eng.Argv(ports[i]), Port: ports[i], GPUs: groups[i],
			LogPath: filepath.Join(cfg.LogDir, "rank-"+strconv.Itoa(i)+".log")}
		backends[i] = proxy.Backend{Rank: i, URL: "http://127.0.0.1:" + strconv.Itoa(ports[i]),
			GPUs: groups[i], MaxNumSeqs: seqs}
	}
	return specs, backends, nil
}

// runServe is `warden serve`. Its actors, in start order: the public
// listener (bound first, so a taken port fails before minutes of loading),
// the proxy (answering 503 while engines load), its scrape loop, and the
// engine group. Stop order on SIGINT/SIGTERM: stop accepting and drain
// in-flight requests (up to --drain-timeout), take the final status, stop
// the engines (SIGTERM to each process group, SIGKILL after --stop-grace),
// then print the summary.
func runServe(c *cli.Context) error {
	cfg, err := configFrom(c)
	if err != nil {
		return cli.Exit("warden serve: "+err.Error(), 2)
	}
	log := newLogger()
	ctx, stopSignals := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	groups, seqs, err := engineGroups(ctx, cfg, log)
	if err != nil {
		return cli.Exit("warden serve: "+err.Error(), 1)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return cli.Exit(fmt.Sprintf("warden serve: cannot listen on %s: %v (choose another --port)", cfg.Addr, err), 1)
	}
	specs, backends, err := engineSpecs(cfg, groups, seqs)
	if err != nil {
		ln.Close()
		return cli.Exit("warden serve: "+err.Error(), 1)
	}
	cfg.Proxy.Registry, cfg.Proxy.Logger = newRegistry(), log
	px, err := proxy.New(cfg.Proxy, backends)
	if err != nil {
		ln.Close()
		return cli.Exit("warden serve: "+err.Error(), 1)
	}
	for _, b := range backends {
		px.SetReplicaState(b.Rank, false, "starting", "engine loading")
	}
	srv, served := startHTTP(ln, px.Handler(), log)
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go px.Run(runCtx)

	log.Info("starting engines", "engine", cfg.Engine, "model", cfg.Model, "dp", cfg.DP, "tp", cfg.TP,
		"max_num_seqs", seqs, "log_dir", cfg.LogDir)
	group, err := launch.Start(ctx, specs, launch.Options{
		StartupTimeout: cfg.StartupTimeout, StopGrace: cfg.StopGrace, Logger: log,
		Progress: os.Stderr, OnState: onEngineState(px),
	})
	if err != nil {
		shutdownHTTP(srv, 0)
		if errors.Is(err, context.Canceled) {
			return cli.Exit("warden serve: interrupted while engines were starting; all stopped", 130)
		}
		return cli.Exit("warden serve: "+err.Error(), 1)
	}
	px.CheckNow(ctx)
	printServeReady(c.App.Writer, cfg, px.Status().Policy)

	final := drain(ctx, stopSignals, srv, served, px, cfg.DrainTimeout, log)
	stopRun()
	stopEngines(group, cfg.StopGrace, log)
	panel.WriteSummary(os.Stderr, final)
	return nil
}

// stopEngines stops every engine (SIGTERM to each process group, SIGKILL
// after grace) and returns once none is left.
func stopEngines(g *launch.Group, grace time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	if err := g.Stop(ctx); err != nil {
		log.Warn("stopping engines", "err", err)
	}
}

// onEngineState feeds the launcher's view of each rank to the proxy: a rank
// is routable only while Ready; a Ready after Down is a restart, whose engine
// counters start from zero again.
func onEngineState(px *proxy.Proxy) func(rank int, s launch.State, reason string) {
	var mu sync.Mutex
	wasDown := map[int]bool{}
	return func(rank int, s launch.State, reason string) {
		mu.Lock()
		restarted := s == launch.Ready && wasDown[rank]
		if s == launch.Down {
			wasDown[rank] = true
		} else if s == launch.Ready {
			wasDown[rank] = false
		}
		mu.Unlock()
		if restarted {
			px.NoteRestart(rank)
		}
		px.SetReplicaState(rank, s == launch.Ready, s.String(), reason)
	}
}

// shutdownHTTP stops accepting connections and waits up to grace for
// in-flight requests; then it closes what is left.
func shutdownHTTP(srv *http.Server, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}

// displayHost is the host to print in a URL a user can paste.
func displayHost(h string) string {
	if h == "" || h == "0.0.0.0" || h == "::" {
		return "127.0.0.1"
	}
	return h
}

// printServeReady prints the one line scripts wait for: the URL to use.
func printServeReady(w io.Writer, cfg serveConfig, policy string) {
	url := "http://" + net.JoinHostPort(displayHost(cfg.Host), strconv.Itoa(cfg.Port))
	fmt.Fprintf(w, "warden: ready at %s (%d x %s, policy %s; status page %s/, logs %s)\n",
		url, cfg.DP, cfg.ServedName, policy, url, cfg.LogDir)
}
