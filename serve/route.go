package serve

import (
	"bufio"
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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/schema"
)

// RouteOptions are `warden route`'s flags as given; Config checks them.
type RouteOptions struct {
	Replicas      []string // --replica: URL, or URL#max_num_seqs=N
	DPRanks       int      // --dp-ranks: each server's vLLM data-parallel engines (0: learn them)
	ReplicasFile  string   // one replica a line; re-read on SIGHUP
	MaxNumSeqs    int      // for a replica that says none
	ServedName    string   // "": what the replicas answer on /v1/models
	StateFile     string   // "": the default path; "none": not saved
	StateInterval time.Duration
	KVEvents      KVEventsOptions
	Router        Router
}

// KVEventsOptions are where the engines a router did not start publish
// their KV-cache events (vLLM's --kv-events-config), for every replica
// without its own URL#kv=: templates in which {host} is the replica URL's
// host; "" none (placement uses the estimate).
type KVEventsOptions struct {
	Endpoint string // --kv-events-endpoint, e.g. tcp://{host}:5557
	Replay   string // --kv-events-replay, e.g. tcp://{host}:5558
}

// apply gives each replica without its own settings the templates' (a
// data-parallel engine's ports offset by its rank, as vLLM does).
func (k KVEventsOptions) apply(bs []router.Backend) error {
	if k.Endpoint == "" {
		if k.Replay != "" {
			return errors.New("--kv-events-replay without --kv-events-endpoint")
		}
		return nil
	}
	for i := range bs {
		if bs[i].KVEvents.On() {
			continue
		}
		u, err := url.Parse(bs[i].URL)
		if err != nil {
			return err
		}
		kv := router.KVEvents{Endpoint: k.Endpoint, Replay: k.Replay}.Template(u.Hostname())
		if bs[i].DPPinned {
			kv = kv.ForRank(bs[i].DPRank)
		}
		bs[i].KVEvents = kv
	}
	return nil
}

// RouteConfig is everything `warden route` needs, validated once.
type RouteConfig struct {
	Replicas      []router.Backend
	Addr          string
	StateFile     string // "" = the session table is not saved
	StateInterval time.Duration
	DrainTimeout  time.Duration
	Core          router.Config // the router core's settings
	Proxy         proxy.Config  // the HTTP data plane's
}

// Config validates the options into a RouteConfig (reading the replicas
// file).
func (o RouteOptions) Config() (RouteConfig, error) {
	cfg := RouteConfig{StateInterval: o.StateInterval, DrainTimeout: o.Router.DrainTimeout}
	var err error
	if cfg.Core, cfg.Proxy, cfg.Addr, err = o.Router.configs(o.ServedName); err != nil {
		return cfg, err
	}
	if o.MaxNumSeqs < 1 {
		return cfg, fmt.Errorf("--max-num-seqs must be at least 1 (got %d)", o.MaxNumSeqs)
	}
	if cfg.StateInterval <= 0 {
		return cfg, fmt.Errorf("--state-interval must be positive (got %v)", cfg.StateInterval)
	}
	specs := o.Replicas
	if f := o.ReplicasFile; f != "" {
		more, err := readReplicasFile(f)
		if err != nil {
			return cfg, err
		}
		specs = append(specs, more...)
	}
	if o.DPRanks < 0 {
		return cfg, fmt.Errorf("--dp-ranks must be 0 (learn each server's engines from its metrics) or more (got %d)", o.DPRanks)
	}
	if cfg.Replicas, err = parseReplicas(specs, o.MaxNumSeqs, o.DPRanks); err != nil {
		return cfg, err
	}
	if err := o.KVEvents.apply(cfg.Replicas); err != nil {
		return cfg, err
	}
	switch cfg.StateFile = o.StateFile; cfg.StateFile {
	case "none":
		cfg.StateFile = ""
	case "":
		port := cfg.Addr[strings.LastIndex(cfg.Addr, ":")+1:]
		cfg.StateFile = filepath.Join(wardenproc.StateDir(), "route-"+port+".sessions.json")
	}
	return cfg, nil
}

// parseReplicas turns replica specs into probed backends, ranks in the
// order given. dp is what a spec without #dp= means by its server's vLLM
// data-parallel engines: 0, learn them from its /metrics (Backend.LearnDP);
// N > 0, N of them (1: the server is one replica); -1, the caller cannot
// pin engines (warden epp), and a spec with dp settings is refused.
func parseReplicas(specs []string, fallbackSeqs, dp int) ([]router.Backend, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("name at least one running server: --replica URL (or --replicas-file FILE)")
	}
	seen := map[string]bool{}
	var bs []router.Backend
	for _, s := range specs {
		b, err := router.ParseReplica(s)
		if err != nil {
			return nil, err
		}
		switch {
		case dp < 0 && (b.DP > 1 || b.DPPinned):
			return nil, fmt.Errorf("replica %q: the gateway addresses an endpoint by host and port, so the picker "+
				"cannot pin one engine of a vLLM data-parallel server; list it without #dp settings (one endpoint), "+
				"or put `warden route` in front of it", s)
		case b.DP > 0 || b.DPPinned:
		case dp == 0:
			b.LearnDP = true
		default:
			b.DP = dp
		}
		b.Probe, b.FallbackMaxNumSeqs = true, fallbackSeqs
		for _, e := range b.ExpandDP() {
			key := e.Key()
			if seen[key] || seen[e.URL] && !e.DPPinned {
				return nil, fmt.Errorf("replica %s is listed twice", key)
			}
			seen[key], seen[e.URL] = true, true
			e.Rank = len(bs)
			bs = append(bs, e)
		}
	}
	return bs, nil
}

// readReplicasFile reads one replica per line; blank lines and lines that
// start with # are skipped.
func readReplicasFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--replicas-file: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--replicas-file %s: %w", path, err)
	}
	return out, nil
}

// servedNameOf asks the replicas' /v1/models (concurrently, briefly) and
// returns the first model name in replica order; "" when none answers.
func servedNameOf(ctx context.Context, bs []router.Backend, log *slog.Logger) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	names := make([]string, len(bs))
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/v1/models", nil)
			if err != nil {
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if resp.StatusCode == http.StatusOK {
				names[i] = gjson.GetBytes(body, "data.0.id").String()
			}
		}()
	}
	wg.Wait()
	name := ""
	for i, n := range names {
		switch {
		case n == "":
		case name == "":
			name = n
		case n != name:
			log.Warn("replicas serve different model names; routing to all as one", "model", name,
				"replica", bs[i].URL, "its_model", n)
		}
	}
	return name
}

// Route is `warden route`, until SIGINT/SIGTERM or ctx ends. Its actors, in start order: the public
// listener (bound first), the proxy with the reloaded session table, one
// health check of every replica (those that answer are in rotation before
// the first request), the HTTP server, the scrape loop and the periodic
// save. Stop order on SIGINT/SIGTERM: stop accepting and drain in-flight
// requests (up to --drain-timeout), take the final status, save the session
// table, print the summary. The replicas are never stopped.
func Route(ctx context.Context, o RouteOptions, stdout io.Writer) error {
	cfg, err := o.Config()
	if err != nil {
		return exit.New(2, "warden route: "+err.Error())
	}
	log := newLogger()
	raiseFDLimit(log)
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return exit.New(1, listenError("warden route", cfg.Addr, err))
	}
	core, px, err := newRouteProxy(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return exit.New(1, "warden route: "+err.Error())
	}
	srv, served := startHTTP(ln, px.Handler(), log)
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go core.Run(runCtx)
	if cfg.StateFile != "" {
		go core.PersistSessions(runCtx, cfg.StateFile, cfg.StateInterval)
	}
	go reloadOnHangup(runCtx, o, core, log)
	awaitTruth(ctx, core) // /health says 503 until then
	printRouteReady(stdout, cfg, core.Status())

	final := drain(ctx, stopSignals, srv, served, core, cfg.DrainTimeout, log)
	stopRun()
	if cfg.StateFile != "" {
		saveSessions(core, cfg.StateFile, log)
	}
	panel.WriteSummary(os.Stderr, final)
	return nil
}

// newRouteProxy builds the core and the proxy over the replicas, reloads
// the session table and checks every replica once.
func newRouteProxy(ctx context.Context, cfg RouteConfig, log *slog.Logger) (*router.Core, *proxy.Proxy, error) {
	if cfg.Core.ServedModel == "" {
		cfg.Core.ServedModel = servedNameOf(ctx, cfg.Replicas, log)
	}
	cfg.Core.Registry, cfg.Core.Logger = newRegistry(), log
	core, px, err := newHTTP(cfg.Core, cfg.Proxy, cfg.Replicas)
	if err != nil {
		return nil, nil, err
	}
	if cfg.StateFile != "" {
		if err := reloadSessions(core, cfg.StateFile, log); err != nil {
			return nil, nil, err
		}
	}
	core.CheckNow(ctx)
	for _, r := range core.Status().Replicas {
		if !r.Up {
			log.Warn("replica not answering; routed around and retried every second", "replica", r.Rank,
				"url", r.URL, "error", r.ScrapeError)
		}
	}
	return core, px, nil
}

// printRouteReady prints the one line that says the router is serving.
func printRouteReady(w io.Writer, cfg RouteConfig, st schema.Status) {
	up := replicasUp(st)
	host, port, _ := net.SplitHostPort(cfg.Addr)
	url := wardenproc.URL(host, port)
	state := cfg.StateFile
	if state == "" {
		state = "not saved"
	}
	model := st.Model
	if model == "" {
		model = "model names passed through"
	}
	fmt.Fprintf(w, "warden: ready at %s (%s of %s replicas up, %s, policy %s; status page %s/, sessions %s)\n",
		url, strconv.Itoa(up), strconv.Itoa(len(st.Replicas)), model, st.Policy, url, state)
}

// replicasUp is how many of the status's replicas are in rotation.
func replicasUp(st schema.Status) (n int) {
	for _, r := range st.Replicas {
		if r.Up {
			n++
		}
	}
	return n
}

// reloadOnHangup re-reads the replica list (--replica and --replicas-file)
// on each SIGHUP until ctx is done and makes the proxy's replicas match it.
func reloadOnHangup(ctx context.Context, o RouteOptions, core *router.Core, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		cfg, err := o.Config()
		if err != nil {
			log.Error("SIGHUP: replica list not reloaded", "error", err)
			continue
		}
		added, removed := syncReplicas(core, cfg.Replicas, log)
		log.Info("SIGHUP: replica list reloaded", "added", added, "removed", removed, "replicas", len(cfg.Replicas))
	}
}

// syncReplicas adds the wanted replicas the core lacks and removes those
// not wanted (replicas added over HTTP included: after a reload the list
// is the truth). Sessions homed on a removed replica fail over on their
// next turn.
func syncReplicas(core *router.Core, want []router.Backend, log *slog.Logger) (added, removed int) {
	return applyReplicas(core, want, func(string) bool { return true }, log)
}

// applyReplicas adds the wanted replicas the core lacks and removes the
// replicas not wanted that removable allows (by URL); it returns how many
// were added and removed.
func applyReplicas(core *router.Core, want []router.Backend, removable func(url string) bool, log *slog.Logger) (added, removed int) {
	wanted := map[string]bool{}
	for _, b := range want {
		wanted[b.URL] = true
	}
	have := map[string]bool{}
	for _, r := range core.Status().Replicas {
		b, err := router.ParseReplica(r.URL)
		if err != nil {
			continue
		}
		have[b.URL] = true
		if !wanted[b.URL] && removable(b.URL) {
			if _, err := core.RemoveReplica(b.URL, -1); err == nil {
				removed++
			}
		}
	}
	for _, b := range want {
		if have[b.URL] {
			continue
		}
		if _, err := core.AddReplica(b); err != nil {
			log.Warn("replica not added", "url", b.URL, "error", err)
			continue
		}
		added++
	}
	return added, removed
}
