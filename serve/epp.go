package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/lmwarden/warden/admin"
	"github.com/lmwarden/warden/epp"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/schema"
)

// EPPOptions are `warden epp`'s flags as given; Config checks them.
type EPPOptions struct {
	Replicas      []string // --replica: URL, or URL#max_num_seqs=N (host by IP address)
	EndpointsFile string   // llm-d's file-discovery schema; watched
	MaxNumSeqs    int      // for a replica that says none
	ServedName    string   // reported in the status; "": what the replicas answer
	GRPCPort      int      // the ext_proc and health services, on Router.Host
	Fallbacks     int      // endpoints after the pick for the gateway's retries
	KVEvents      KVEventsOptions
	// StateFile is where the session table is saved and reloaded from
	// (""/"none": not saved; the engines' KV events are then the picker's
	// memory across restarts); StateInterval how often while running.
	StateFile     string
	StateInterval time.Duration
	Router        Router // placement, the HTTP port of the panel and metrics, the admin token
}

// EPPConfig is everything `warden epp` needs, validated once.
type EPPConfig struct {
	Replicas      []router.Backend
	EndpointsFile string
	KVEvents      KVEventsOptions // the templates, for engines the endpoints file adds later
	StateFile     string          // "": not saved
	StateInterval time.Duration
	GRPCAddr      string
	HTTPAddr      string
	DrainTimeout  time.Duration
	Core          router.Config
	EPP           epp.Config
	AdminToken    string
	// Flagged are the --replica engines' URLs: an endpoints file's reload
	// never removes them. FromFile are the endpoints file's at the start:
	// the ones its reloads may remove.
	Flagged, FromFile map[string]bool
}

// Config validates the options (reading the endpoints file).
func (o EPPOptions) Config() (EPPConfig, error) {
	cfg := EPPConfig{EndpointsFile: o.EndpointsFile, DrainTimeout: o.Router.DrainTimeout, StateInterval: o.StateInterval,
		KVEvents: o.KVEvents}
	if o.StateFile != "none" {
		cfg.StateFile = o.StateFile
	}
	if cfg.StateFile != "" && cfg.StateInterval <= 0 {
		return cfg, fmt.Errorf("--state-interval must be positive (got %v)", cfg.StateInterval)
	}
	cc, pc, addr, err := o.Router.configs(o.ServedName)
	if err != nil {
		return cfg, err
	}
	cfg.HTTPAddr, cfg.Core, cfg.AdminToken = addr, cc, pc.AdminToken
	cfg.EPP = epp.Config{Fallbacks: o.Fallbacks}
	if o.Fallbacks < 0 {
		return cfg, fmt.Errorf("--fallbacks must be >= 0, got %d", o.Fallbacks)
	}
	if o.GRPCPort < 1 || o.GRPCPort > 65535 || o.GRPCPort == o.Router.Port {
		return cfg, fmt.Errorf("--grpc-port %d is not a TCP port apart from --port", o.GRPCPort)
	}
	cfg.GRPCAddr = net.JoinHostPort(o.Router.Host, strconv.Itoa(o.GRPCPort))
	if o.MaxNumSeqs < 1 {
		return cfg, fmt.Errorf("--max-num-seqs must be at least 1 (got %d)", o.MaxNumSeqs)
	}
	specs, err := o.endpointSpecs()
	if err != nil {
		return cfg, err
	}
	if cfg.Replicas, err = parseReplicas(specs, o.MaxNumSeqs, -1); err != nil {
		return cfg, err
	}
	if err := o.KVEvents.apply(cfg.Replicas); err != nil {
		return cfg, err
	}
	cfg.Flagged, cfg.FromFile = map[string]bool{}, map[string]bool{}
	for _, b := range cfg.Replicas {
		cfg.FromFile[b.URL] = true
	}
	if len(o.Replicas) > 0 {
		flagged, err := parseReplicas(o.Replicas, o.MaxNumSeqs, -1)
		if err != nil {
			return cfg, err
		}
		for _, b := range flagged {
			cfg.Flagged[b.URL] = true
			delete(cfg.FromFile, b.URL)
		}
	}
	for _, b := range cfg.Replicas {
		u, _ := router.ParseReplica(b.URL)
		if err := epp.CheckEndpoint(hostOf(u.URL)); err != nil {
			return cfg, fmt.Errorf("replica %s: %w", b.URL, err)
		}
	}
	return cfg, nil
}

// endpointSpecs are the --replica flags and the endpoints file's entries.
func (o EPPOptions) endpointSpecs() ([]string, error) {
	specs := o.Replicas
	if o.EndpointsFile != "" {
		eps, err := epp.ReadEndpoints(o.EndpointsFile)
		if err != nil {
			return nil, err
		}
		for _, e := range eps {
			specs = append(specs, e.URL())
		}
	}
	if len(specs) == 0 {
		return nil, errors.New("name the engines: --replica URL (repeat) or --endpoints-file FILE (llm-d's file-discovery schema)")
	}
	return specs, nil
}

// EPPEndpoints are the engines named by --replica URLs and an endpoints
// file, as the gateway is told them (`warden epp envoy-config`).
func EPPEndpoints(replicas []string, file string) ([]epp.Endpoint, error) {
	specs, err := EPPOptions{Replicas: replicas, EndpointsFile: file}.endpointSpecs()
	if err != nil {
		return nil, err
	}
	bs, err := parseReplicas(specs, 1, -1)
	if err != nil {
		return nil, err
	}
	var out []epp.Endpoint
	for _, b := range bs {
		hp := hostOf(b.URL)
		if err := epp.CheckEndpoint(hp); err != nil {
			return nil, fmt.Errorf("replica %s: %w", b.URL, err)
		}
		host, port, _ := net.SplitHostPort(hp)
		out = append(out, epp.Endpoint{Name: "engine-" + strconv.Itoa(b.Rank), Address: host, Port: port})
	}
	return out, nil
}

// hostOf is the host:port of a replica URL ("" when it does not parse:
// CheckEndpoint then refuses it).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// EPP is `warden epp`, until SIGINT/SIGTERM or ctx ends: the endpoint
// picker's gRPC services (ext_proc and health) on --grpc-port, the panel,
// /metrics and the admin endpoints over HTTP on --port, the engines
// scraped as `warden route` scrapes them, and the endpoints file watched.
// Stop order: stop taking new streams and let those in flight end (up to
// --drain-timeout), take the final status, print the summary. The engines
// are never stopped.
func EPP(ctx context.Context, o EPPOptions, stdout io.Writer) error {
	cfg, err := o.Config()
	if err != nil {
		return exit.New(2, "warden epp: "+err.Error())
	}
	log := newLogger()
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	gln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return exit.Newf(1, "warden epp: cannot listen on %s: %v (choose another --grpc-port)", cfg.GRPCAddr, err)
	}
	hln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		gln.Close()
		return exit.Newf(1, "warden epp: cannot listen on %s: %v (choose another --port)", cfg.HTTPAddr, err)
	}
	if cfg.Core.ServedModel == "" {
		cfg.Core.ServedModel = servedNameOf(ctx, cfg.Replicas, log)
	}
	cfg.Core.Registry, cfg.Core.Logger = newRegistry(), log
	core, err := router.New(cfg.Core, cfg.Replicas)
	if err == nil && cfg.StateFile != "" {
		err = reloadSessions(core, cfg.StateFile, log)
	}
	if err == nil {
		var picker *epp.Server
		if picker, err = epp.New(core, cfg.EPP); err == nil {
			return runEPP(ctx, stopSignals, cfg, core, picker, gln, hln, log, stdout)
		}
	}
	gln.Close()
	hln.Close()
	return exit.New(1, "warden epp: "+err.Error())
}

func runEPP(ctx context.Context, stopSignals func(), cfg EPPConfig, core *router.Core, picker *epp.Server,
	gln, hln net.Listener, log *slog.Logger, stdout io.Writer) error {
	core.CheckNow(ctx)
	for _, r := range core.Status().Replicas {
		if !r.Up {
			log.Warn("endpoint not answering; left out of the picks and checked every scrape", "replica", r.Rank,
				"url", r.URL, "error", r.ScrapeError)
		}
	}
	g := grpc.NewServer(picker.ServerOptions()...) // buffered bodies up to the limit, keepalive
	picker.Register(g)
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- g.Serve(gln) }()
	mux := http.NewServeMux()
	admin.New(core, cfg.AdminToken).CheckReplicas(func(b router.Backend) error {
		return epp.CheckEndpoint(hostOf(b.URL)) // the gateway is told endpoints as ip:port
	}).Register(mux)
	srv, served := startHTTP(hln, mux, log)
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go core.Run(runCtx)
	go picker.WatchHealth(runCtx, 200*time.Millisecond) // SERVING once the core is ready: engines up, their history replayed
	if cfg.EndpointsFile != "" {
		go watchEndpointsFile(runCtx, cfg, core, log)
	}
	if cfg.StateFile != "" {
		go core.PersistSessions(runCtx, cfg.StateFile, cfg.StateInterval)
	}
	awaitTruth(ctx, core)
	printEPPReady(stdout, cfg, core.Status())

	select {
	case <-ctx.Done():
		log.Info("shutting down: letting the streams in flight end", "grace", cfg.DrainTimeout)
	case err := <-served:
		log.Error("http server stopped", "err", err)
	case err := <-grpcDone:
		log.Error("gRPC server stopped", "err", err)
	}
	stopSignals()
	picker.Drain() // readiness NOT_SERVING: the gateway sends new streams elsewhere
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(cfg.DrainTimeout):
		g.Stop()
	}
	shutdownHTTP(srv, time.Second)
	stopRun()
	if err := core.CloseDecisionLog(); err != nil {
		log.Warn("the decision log was not written completely", "error", err)
	}
	if cfg.StateFile != "" {
		saveSessions(core, cfg.StateFile, log)
	}
	core.CheckNow(context.Background())
	panel.WriteSummary(os.Stderr, core.Status())
	return nil
}

// watchEndpointsFile makes the core's replicas follow the endpoints file.
func watchEndpointsFile(ctx context.Context, cfg EPPConfig, core *router.Core, log *slog.Logger) {
	fallback := core.FallbackMaxNumSeqs()
	owned := fileEndpoints{flagged: cfg.Flagged, owned: cfg.FromFile}
	err := epp.WatchEndpoints(ctx, cfg.EndpointsFile, log, func(eps []epp.Endpoint) {
		var specs []string
		for _, e := range eps {
			specs = append(specs, e.URL())
		}
		var want []router.Backend
		if len(specs) > 0 {
			var err error
			if want, err = parseReplicas(specs, fallback, -1); err == nil {
				err = cfg.KVEvents.apply(want) // an engine the file adds publishes where the templates say
			}
			if err != nil {
				log.Error("endpoints file not reloaded", "error", err)
				return
			}
		} else if len(cfg.Flagged) == 0 {
			log.Error("endpoints file not reloaded: it names no endpoint, and no --replica is given; the endpoints stay as they were")
			return
		}
		added, removed := owned.reload(core, want, log)
		log.Info("endpoints file reloaded", "added", added, "removed", removed, "endpoints", len(want))
		for _, r := range core.Replicas() {
			go core.CheckReplica(ctx, r.Rank()) // an added endpoint enters the picks once it answers
		}
	})
	if err != nil {
		log.Error("the endpoints file is not watched", "error", err)
	}
}

// fileEndpoints is what an endpoints file contributed to the core. A
// reload removes only endpoints the file itself had named and names no
// longer: the --replica engines (flagged) and those added through POST
// /warden/replicas are not the file's to remove.
type fileEndpoints struct {
	flagged map[string]bool // --replica URLs
	owned   map[string]bool // URLs the file named at its last read
}

// reload makes the file's part of the core's replicas want; it returns
// how many were added and removed.
func (f *fileEndpoints) reload(core *router.Core, want []router.Backend, log *slog.Logger) (added, removed int) {
	added, removed = applyReplicas(core, want, func(url string) bool { return f.owned[url] && !f.flagged[url] }, log)
	f.owned = map[string]bool{}
	for _, b := range want {
		f.owned[b.URL] = true
	}
	return added, removed
}

// printEPPReady prints the one line that says the picker is serving.
func printEPPReady(w io.Writer, cfg EPPConfig, st schema.Status) {
	up := replicasUp(st)
	host, port, _ := net.SplitHostPort(cfg.HTTPAddr)
	url := wardenproc.URL(host, port)
	fmt.Fprintf(w, "warden: endpoint picker ready at %s (gRPC ext_proc; %d of %d endpoints up, policy %s; status page %s/)\n",
		cfg.GRPCAddr, up, len(st.Replicas), st.Policy, url)
	fmt.Fprintln(w, endpointLimits(st))
}
