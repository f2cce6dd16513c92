package serve

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/hostcpu"
	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/kvevents"
	"github.com/lmwarden/warden/launch"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/schema"
)

// Options are `warden serve`'s flags as given (the command layer,
// command, fills them from the flags and their WARDEN_*
// variables); Config checks them.
type Options struct {
	Model, ServedName string
	DP, TP            int
	GPUs              string
	Device            string // "gpu" or "cpu"
	CPUKVCache        string // --cpu-kv-cache: "auto" or a size
	CPUPin            string // --cpu-pin: "cores" or "threads"
	KVOffload         string // --kv-offload: "off", "auto" or a size per rank; "": the default (DefaultKVOffload)
	// KVOffloadDefault is set by Config when KVOffload was not given: auto
	// then falls back to no tier, with a line saying why, where an explicit
	// --kv-offload auto would be an error.
	KVOffloadDefault bool
	Tools, Reasoning string // --tools, --reasoning: "auto", "off" or a vLLM parser name
	MaxNumSeqs       int
	Engine, VLLMPath string
	LogDir           string
	StartupTimeout   time.Duration
	StopGrace        time.Duration
	Extra            []string // after --: every engine's
	Router           Router
	// SimKVCache is the simulator's KV cache size for its arguments
	// (engineplan.Request.SimKVCache; the command layer passes
	// sim.KVCacheBytes). Nil: unknown.
	SimKVCache func(args []string, getenv func(string) string) (uint64, error)
	// SimFirstContact is what a user meets first on the simulator's engines
	// for their arguments (the command layer passes sim.FirstContact), told
	// at start and in the status. Nil: nothing said.
	SimFirstContact func(args []string) []string
	// SimModelContext is the context the simulator serves a model at and
	// where it learnt it, 0 when it knows nothing of the model (the command
	// layer passes sim.ModelContext): a name it does not know is likely
	// misspelt, and the warden says so at start. Nil: nothing said.
	SimModelContext func(model string, getenv func(string) string) (int, string)
	// Image is --image: every rank's vLLM runs in a container of this image
	// (docs/container.md); "" a host vLLM. ContainerRuntime is
	// --container-runtime: docker, podman (or a path to one), "" detected.
	Image, ContainerRuntime string
	// VLLMDP is --vllm-dp: one engine server run with vLLM's own data
	// parallelism (--data-parallel-size DP) instead of one server per rank;
	// each rank is one of its engines, pinned with X-data-parallel-rank
	// (docs/vllm-dp.md).
	VLLMDP bool
	// KVEvents is --kv-events: the engines publish their KV-cache events
	// to the router's ledger (engineplan.KVEvents; not with --image).
	// KVEventsDir is the private folder of their sockets, made by serve.
	KVEvents    bool
	KVEventsDir string
}

// plan is what the engines are planned from.
func (o Options) plan() engineplan.Request {
	return engineplan.Request{Model: o.Model, Engine: o.Engine, Device: o.Device, VLLMPath: o.VLLMPath,
		DP: o.DP, TP: o.TP, GPUs: o.GPUs, CPUKVCache: o.CPUKVCache, KVOffload: o.KVOffload,
		KVOffloadDefault: o.KVOffloadDefault, Tools: o.Tools, Reasoning: o.Reasoning, MaxNumSeqs: o.MaxNumSeqs,
		Extra: o.Extra, SimKVCache: o.SimKVCache, Image: o.Image, ContainerRuntime: o.ContainerRuntime}
}

// engineSetup is what the status reports of the engines' tool-calling
// flags: the warden's choice, or what was given after --.
func engineSetup(extra []string, c engineplan.ToolsChoice) *schema.EngineSetup {
	setup := &schema.EngineSetup{ToolCallParser: c.ToolParser, AutoToolChoice: c.ToolParser != "",
		ReasoningParser: c.ReasoningParser, Tools: c.Info, ToolsFix: c.Fix}
	if c.FromExtra {
		setup.ToolCallParser, _ = argv.Value(extra, "--tool-call-parser")
		setup.AutoToolChoice = argv.Has(extra, "--enable-auto-tool-choice")
	}
	if v, ok := argv.Value(extra, "--reasoning-parser"); ok {
		setup.ReasoningParser = v
	}
	return setup
}

// Config is everything `warden serve` needs, validated once: the options
// with their defaults filled in, the listen address and the proxy's config.
type Config struct {
	Options
	Addr  string        // host:port to listen on
	Core  router.Config // the router core's settings
	Proxy proxy.Config  // the HTTP data plane's
}

// Config validates the options into a Config.
func (o Options) Config() (Config, error) {
	o.Tools, o.Reasoning = strings.TrimSpace(o.Tools), strings.TrimSpace(o.Reasoning)
	cfg := Config{Options: o}
	if cfg.ServedName == "" {
		cfg.ServedName = cfg.Model
	}
	switch {
	case cfg.DP < 1 || cfg.TP < 1:
		return cfg, fmt.Errorf("--dp and --tp must be at least 1 (got dp %d, tp %d)", cfg.DP, cfg.TP)
	case cfg.Engine != "vllm" && cfg.Engine != "sim":
		return cfg, fmt.Errorf("--engine must be vllm or sim, not %q", cfg.Engine)
	case cfg.Device != "gpu" && cfg.Device != "cpu":
		return cfg, fmt.Errorf("--device must be gpu or cpu, not %q", cfg.Device)
	case cfg.Device == "cpu" && cfg.Engine == "sim":
		return cfg, fmt.Errorf("--device cpu launches vLLM's CPU build; the simulator (--engine sim) needs no device")
	case cfg.Device == "cpu" && cfg.TP > 1:
		return cfg, fmt.Errorf("--tp %d with --device cpu: a CPU rank is one engine on its own cores; use --dp for more replicas", cfg.TP)
	case cfg.Image != "" && cfg.Engine == "sim":
		return cfg, fmt.Errorf("--image runs vLLM from its container image; the simulator (--engine sim) needs none")
	case cfg.ContainerRuntime != "" && cfg.Image == "":
		return cfg, fmt.Errorf("--container-runtime %s is for engines from an image: add --image REF", cfg.ContainerRuntime)
	case cfg.ContainerRuntime != "" && !slices.Contains(engineplan.Runtimes, strings.TrimSuffix(filepath.Base(cfg.ContainerRuntime), ".exe")):
		return cfg, fmt.Errorf("--container-runtime %q: want docker or podman (a name on PATH or a path)", cfg.ContainerRuntime)
	case cfg.VLLMDP && cfg.DP < 2:
		return cfg, fmt.Errorf("--vllm-dp runs vLLM's own data parallelism over --dp ranks: give --dp 2 or more")
	case cfg.Device == "cpu" && cfg.GPUs != "":
		return cfg, fmt.Errorf("--gpus is for --device gpu; a CPU rank's cores are chosen from the warden's affinity mask (taskset)")
	}
	switch cfg.CPUPin {
	case "", hostcpu.PinCores, hostcpu.PinThreads:
	default:
		return cfg, fmt.Errorf("--cpu-pin %q: want %s (each rank's processes on its own cores) or %s (only vLLM's compute threads bound, its API server and engine core free to run on any core, as vLLM's own data parallelism does)",
			cfg.CPUPin, hostcpu.PinCores, hostcpu.PinThreads)
	}
	if cfg.Device == "cpu" && cfg.CPUKVCache != "auto" {
		if _, err := hostcpu.ParseSize(cfg.CPUKVCache); err != nil {
			return cfg, fmt.Errorf("--cpu-kv-cache: %w, or auto", err)
		}
	}
	if err := engineplan.CheckExtra(cfg.Extra); err != nil {
		return cfg, err
	}
	if err := engineplan.CheckToolSettings(cfg.Tools, cfg.Reasoning, cfg.Extra); err != nil {
		return cfg, err
	}
	if strings.TrimSpace(cfg.KVOffload) == "" {
		cfg.KVOffload, cfg.KVOffloadDefault = DefaultKVOffload(cfg.Engine, cfg.Device), true
		if argv.Has(cfg.Extra, "--kv-transfer-config", "--kv_transfer_config") {
			cfg.KVOffload = "off" // a connector of the user's, which vLLM's offloading would replace
		}
	}
	for _, kw := range []string{"off", "auto"} {
		if strings.EqualFold(strings.TrimSpace(cfg.KVOffload), kw) {
			cfg.KVOffload = kw
		}
	}
	if err := checkKVOffload(cfg.Options); err != nil {
		return cfg, err
	}
	var err error
	if cfg.Core, cfg.Proxy, cfg.Addr, err = cfg.Router.configs(cfg.ServedName); err != nil {
		return cfg, err
	}
	if cfg.LogDir == "" {
		cfg.LogDir = wardenproc.DefaultLogDir(time.Now())
	}
	return cfg, nil
}

// DefaultKVOffload is --kv-offload when not given: auto for vLLM on GPUs,
// where a host tier of 2-4 x a card's KV cache lost nowhere and won from
// where the conversations overflow the cards (docs/kv-offload.md, "The
// default"); off for vLLM's CPU build, which has no tier, and for the
// simulator, whose results should not depend on the memory of the machine
// that runs it (--kv-offload auto there shows what a GPU host would do).
func DefaultKVOffload(engine, device string) string {
	if engine == "vllm" && device == "gpu" {
		return "auto"
	}
	return "off"
}

// checkKVOffload refuses a --kv-offload that cannot work, before anything
// starts: vLLM's CPU platform cannot run its offloading worker (vLLM 0.32.0
// v1/kv_offload/cpu/spec.py, CPUOffloadingSpec.get_worker: "CPU Offloading
// is currently only supported on CUDA-alike and XPU GPUs", raised once the
// model is loaded), and vLLM's offloading replaces the connector of a
// --kv-transfer-config given after -- (config/vllm.py,
// _post_init_kv_transfer_config).
func checkKVOffload(cfg Options) error {
	if err := engineplan.CheckKVOffload(cfg.KVOffload); err != nil {
		return err
	}
	if cfg.KVOffload == "off" {
		return nil
	}
	if cfg.Device == "cpu" {
		return fmt.Errorf("--kv-offload %s with --device cpu: vLLM's native KV offloading runs on CUDA, ROCm "+
			"and XPU GPUs only (its CPU platform refuses the offloading worker after loading the model); "+
			"use --kv-offload off, or --cpu-kv-cache for a larger KV cache", cfg.KVOffload)
	}
	if argv.Has(cfg.Extra, "--kv-transfer-config", "--kv_transfer_config") {
		return fmt.Errorf("--kv-offload %s with -- --kv-transfer-config: vLLM's offloading would replace that "+
			"connector with its own; use one or the other (--kv-offload off keeps yours)", cfg.KVOffload)
	}
	return nil
}

// engineSpecs builds one launch spec and one proxy backend per rank; with
// a container (--image), each rank's spec runs its engine in one. With
// --vllm-dp it is one spec, a server of DP engines, and one backend per
// engine pinned to it (dpSpec).
func engineSpecs(cfg Options, d engineplan.Devices, tools engineplan.ToolsChoice, fit engineplan.ContextChoice,
	cont *engineplan.Container) ([]launch.Spec, []router.Backend, error) {
	servers := cfg.DP
	if cfg.VLLMDP {
		servers = 1
	}
	free, err := ports.Free(servers, "127.0.0.1")
	if err != nil {
		return nil, nil, fmt.Errorf("finding %d free loopback ports: %w", servers, err)
	}
	eng := engineplan.Engine{Kind: cfg.Engine, VLLMPath: cfg.VLLMPath, Model: cfg.Model,
		ServedName: cfg.ServedName, MaxNumSeqs: d.Seqs, TP: cfg.TP, KVBytes: d.KVBytes, OffloadBytes: d.Offload,
		ToolFlags: tools.Flags(), MaxModelLen: fit.MaxModelLen, Extra: cfg.Extra}
	if cont != nil {
		eng.Host = "0.0.0.0" // the container's own network; the port is published on 127.0.0.1
		if dir := engineplan.LocalModelDir(cfg.Model); dir != "" {
			eng.Model, cont.ModelDir = dir, dir
		}
	}
	kv, err := kvEventsPlan(cfg, cont)
	if err != nil {
		return nil, nil, err
	}
	eng.KVEvents = kv
	if cfg.VLLMDP {
		eng.DP = cfg.DP
		spec, backends := dpSpec(cfg, d, eng, free[0], cont)
		for i := range backends {
			backends[i].KVEvents = kvEndpoints(cfg, kv, free[0], i)
		}
		return []launch.Spec{spec}, backends, nil
	}
	specs := make([]launch.Spec, cfg.DP)
	backends := make([]router.Backend, cfg.DP)
	for i := range specs {
		specs[i] = launch.Spec{Rank: i, Argv: eng.Argv(free[i]), Port: free[i], GPUs: d.GPUs[i],
			LogPath: filepath.Join(cfg.LogDir, "rank-"+strconv.Itoa(i)+".log")}
		backends[i] = router.Backend{Rank: i, URL: "http://127.0.0.1:" + strconv.Itoa(free[i]),
			GPUs: d.GPUs[i], MaxNumSeqs: d.Seqs, KVEvents: kvEndpoints(cfg, kv, free[i], 0)}
		if i < len(d.CPUs) {
			specs[i].Env = d.CPUs[i].Env()
			if cfg.CPUPin != hostcpu.PinThreads {
				specs[i].CPUs = d.CPUs[i].CPUs
			}
			backends[i].GPUs = []string{d.CPUs[i].Label()}
		}
		if cont != nil {
			dev := engineplan.RankDevices{GPUs: d.GPUs[i]}
			if i < len(d.CPUs) {
				dev.Env, dev.CPUs = specs[i].Env, specs[i].CPUs
			}
			specs[i].Argv = cont.Argv(i, free[i], dev, eng.ServeArgs(free[i]))
			specs[i].Container = &launch.Container{Runtime: cont.Runtime, Name: cont.Name(i), CIDFile: cont.CIDFile(i)}
		}
	}
	return specs, backends, nil
}

// kvEventsDir makes the private folder of the engines' KV-event sockets
// (0700: the events carry the prompts' token ids); "" when they publish
// none there (kvEventsPlan).
func kvEventsDir(cfg Options) (string, error) {
	if !cfg.KVEvents || cfg.Image != "" || cfg.VLLMDP {
		return "", nil
	}
	dir, err := os.MkdirTemp("", "warden-kv-")
	if err != nil {
		return "", fmt.Errorf("a folder for the engines' KV-event sockets: %w", err)
	}
	return dir, nil
}

// removeAll removes dir ("" nothing).
func removeAll(dir string) {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// kvEventsPlan is how the engines publish their KV-cache events: ipc
// sockets in cfg.KVEventsDir for one server per rank, loopback ports for
// vLLM's own data parallelism (its ranks offset a tcp port); none without
// --kv-events, with --image (the sockets would need the container's
// network), or when the user's -- --kv-events-config says (kvEndpoints reads it).
func kvEventsPlan(cfg Options, cont *engineplan.Container) (engineplan.KVEvents, error) {
	if !cfg.KVEvents || cont != nil {
		return engineplan.KVEvents{}, nil
	}
	if !cfg.VLLMDP {
		return engineplan.KVEvents{Dir: cfg.KVEventsDir}, nil
	}
	pub, err := ports.Run(cfg.DP, "127.0.0.1")
	if err != nil {
		return engineplan.KVEvents{}, fmt.Errorf("KV events: %w (or give --kv-events=false)", err)
	}
	replay, err := ports.Run(cfg.DP, "127.0.0.1")
	if err != nil || (replay < pub+cfg.DP && pub < replay+cfg.DP) {
		return engineplan.KVEvents{}, fmt.Errorf("KV events: no second run of %d free loopback ports (or give --kv-events=false)", cfg.DP)
	}
	return engineplan.KVEvents{Pub: pub, Replay: replay}, nil
}

// kvEndpoints is where the router subscribes to rank's events of the
// server on port: the plan's, or the user's own -- --kv-events-config.
func kvEndpoints(cfg Options, kv engineplan.KVEvents, port, rank int) router.KVEvents {
	if pub, replay, bind, ok := engineplan.UserKVEvents(cfg.Extra); ok {
		pub, _ = kvevents.RankEndpoint(pub, rank)
		if replay != "" {
			replay, _ = kvevents.RankEndpoint(replay, rank)
		}
		return router.KVEvents{Endpoint: pub, Replay: replay, Bind: bind}
	}
	if !kv.On() {
		return router.KVEvents{}
	}
	pub, replay, bind := kv.Endpoints(port, rank)
	return router.KVEvents{Endpoint: pub, Replay: replay, Bind: bind}
}

// dpSpec is --vllm-dp's one server: `vllm serve --data-parallel-size DP` on
// port, given every rank's GPUs in rank order (vLLM gives its local rank i
// the i-th group of TP devices) or, on CPUs, every rank's cores with each
// rank's binding in vLLM's per-rank form (VLLM_CPU_OMP_THREADS_BIND=0-3|4-7);
// and one backend per engine, all at its URL, each pinned to its engine.
func dpSpec(cfg Options, d engineplan.Devices, eng engineplan.Engine, port int, cont *engineplan.Container) (launch.Spec, []router.Backend) {
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	spec := launch.Spec{Rank: 0, Argv: eng.Argv(port), Port: port, LogPath: filepath.Join(cfg.LogDir, "rank-0.log")}
	backends := make([]router.Backend, cfg.DP)
	var binds, nodes []string
	for i := range backends {
		backends[i] = router.Backend{Rank: i, URL: url, GPUs: d.GPUs[i], MaxNumSeqs: d.Seqs, DPPinned: true, DPRank: i, DP: cfg.DP}
		spec.GPUs = append(spec.GPUs, d.GPUs[i]...)
		if i < len(d.CPUs) {
			set := d.CPUs[i]
			binds = append(binds, hostcpu.FormatList(set.Bind))
			// vLLM reads the nodes as one device per local rank (v1/engine/utils.py,
			// get_physical_gpu_ids_for_local_dp_rank): the rank's first node.
			nodes = append(nodes, strconv.Itoa(set.Nodes[0]))
			if cfg.CPUPin != hostcpu.PinThreads {
				spec.CPUs = append(spec.CPUs, set.CPUs...)
			}
			backends[i].GPUs = []string{d.CPUs[i].Label()}
		}
	}
	if binds != nil {
		spec.Env = []string{hostcpu.BindEnv + "=" + strings.Join(binds, "|"), hostcpu.NodesEnv + "=" + strings.Join(nodes, ",")}
	}
	if cont != nil {
		dev := engineplan.RankDevices{GPUs: spec.GPUs, Env: spec.Env, CPUs: spec.CPUs}
		spec.Argv = cont.Argv(0, port, dev, eng.ServeArgs(port))
		spec.Container = &launch.Container{Runtime: cont.Runtime, Name: cont.Name(0), CIDFile: cont.CIDFile(0)}
	}
	return spec, backends
}

// Main is `warden serve`, until SIGINT/SIGTERM or ctx ends; the error
// carries the exit status (2 for bad options, 130 when interrupted while
// the engines start). Its actors, in start order: the public
// listener (bound first, so a taken port fails before minutes of loading),
// the proxy (answering 503 while engines load), its scrape loop, and the
// engine group. Stop order on SIGINT/SIGTERM: stop accepting and drain
// in-flight requests (up to --drain-timeout), take the final status, stop
// the engines (SIGTERM to each process group, SIGKILL after --stop-grace),
// then print the summary.
func Main(ctx context.Context, o Options, stdout io.Writer) error {
	cfg, err := serveConfig(o)
	if err != nil {
		return err
	}
	log := newLogger()
	raiseFDLimit(log)
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	plan := cfg.plan()
	facts, devices, cont, err := engineFacts(ctx, cfg.Options, plan, log)
	if err != nil {
		return exit.New(1, "warden serve: "+err.Error())
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return exit.New(1, listenError("warden serve", cfg.Addr, err))
	}
	tools, fit, setup := chooseFlags(cfg.Options, plan, facts, devices, log)
	if cfg.KVEventsDir, err = kvEventsDir(cfg.Options); err != nil {
		ln.Close()
		return exit.New(1, "warden serve: "+err.Error())
	}
	defer removeAll(cfg.KVEventsDir)
	specs, backends, err := engineSpecs(cfg.Options, devices, tools, fit, cont)
	if err != nil {
		ln.Close()
		return exit.New(1, "warden serve: "+err.Error())
	}
	replicasOf := serverReplicas(cfg.VLLMDP, backends)
	cfg.Core.Registry, cfg.Core.Logger, cfg.Core.Engines = newRegistry(), log, setup
	core, px, err := newHTTP(cfg.Core, cfg.Proxy, backends)
	if err != nil {
		ln.Close()
		return exit.New(1, "warden serve: "+err.Error())
	}
	for _, b := range backends {
		core.SetReplicaState(b.Rank, false, "starting", "engine loading")
	}
	core.SetStarting(true)
	srv, served := startHTTP(ln, px.Handler(), log)
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go core.Run(runCtx)

	log.Info("starting engines", "engine", cfg.Engine, "image", cfg.Image, "device", cfg.Device, "model", cfg.Model, "dp", cfg.DP, "tp", cfg.TP,
		"max_num_seqs", devices.Seqs, "log_dir", cfg.LogDir)
	group, err := launch.Start(ctx, specs, launch.Options{
		StartupTimeout: cfg.StartupTimeout, StopGrace: cfg.StopGrace, Logger: log,
		Progress: os.Stderr, OnState: onEngineState(core, replicasOf),
		OnCrash: func(rank int, c launch.Crash) {
			for _, r := range replicasOf(rank) {
				core.SetReplicaCrash(r, schema.Crash{At: c.At, Cause: c.Cause, Fix: c.Fix, Failures: c.Failures,
					CrashLoop: c.Loop, RestartsTried: c.Restarts, RetrySeconds: c.Delay.Seconds()})
			}
		},
	})
	if err != nil {
		shutdownHTTP(srv, 0)
		if errors.Is(err, context.Canceled) {
			return exit.New(130, "warden serve: interrupted while engines were starting; all stopped")
		}
		return exit.New(1, "warden serve: "+err.Error())
	}
	core.CheckNow(ctx)
	core.SetStarting(false)
	if cfg.Engine == "vllm" {
		logEngineVersion(ctx, cfg.Image, facts, backends[0].URL, log)
	}
	printServeReady(stdout, cfg, core.Status().Policy, setup.Simulator)

	final := drain(ctx, stopSignals, srv, served, core, cfg.Router.DrainTimeout, log)
	stopRun()
	stopEngines(group, cfg.StopGrace, log)
	panel.WriteSummary(os.Stderr, final)
	return nil
}

// serveConfig is o's Config with the engine log folder made: --log-dir, or
// this run's own folder under the state directory, made now so that two
// wardens started in the same second never share one. Its errors are exit
// errors (2 for bad options).
func serveConfig(o Options) (Config, error) {
	cfg, err := o.Config()
	if err != nil {
		return cfg, exit.New(2, "warden serve: "+err.Error())
	}
	if o.LogDir == "" {
		if cfg.LogDir, err = wardenproc.NewRunDir(time.Now()); err != nil {
			return cfg, exit.New(1, "warden serve: the engine log folder: "+err.Error())
		}
	}
	return cfg, nil
}

// chooseFlags picks the engines' tool and context flags and says how they
// were started, for the status.
func chooseFlags(cfg Options, plan engineplan.Request, facts engineplan.Facts, devices engineplan.Devices,
	log *slog.Logger) (engineplan.ToolsChoice, engineplan.ContextChoice, *schema.EngineSetup) {
	tools, fit := engineplan.ChooseFlags(plan, facts, log)
	setup := engineSetup(cfg.Extra, tools)
	setup.OffloadHint = engineplan.OffloadHint(plan, devices)
	setup.Simulator = simNotes(cfg, log)
	return tools, fit, setup
}

// engineFacts reads what the engines' plan needs of the host: the facts
// (vLLM's version, the model's files), the devices, and the container
// (nil without --image).
func engineFacts(ctx context.Context, cfg Options, plan engineplan.Request, log *slog.Logger) (
	engineplan.Facts, engineplan.Devices, *engineplan.Container, error) {
	facts, err := engineplan.ReadFacts(ctx, plan, log)
	if err != nil {
		return facts, engineplan.Devices{}, nil, err
	}
	devices, err := engineplan.FindDevices(ctx, plan, facts, log)
	if err != nil {
		return facts, devices, nil, err
	}
	cont, err := engineContainer(ctx, cfg, facts, log)
	return facts, devices, cont, err
}

// serverReplicas is the replicas of an engine server, by its rank: the
// rank's own, or with --vllm-dp every replica (one server holds them all).
func serverReplicas(vllmDP bool, backends []router.Backend) func(rank int) []int {
	if !vllmDP {
		return func(rank int) []int { return []int{rank} }
	}
	all := make([]int, len(backends))
	for i, b := range backends {
		all[i] = b.Rank
	}
	return func(int) []int { return all }
}

// engineContainer is how the engines run from --image (nil without one):
// named and labelled by this run, the host's Hugging Face cache mounted.
// It first removes what wardens that are gone left (launch.RemoveLeftovers).
func engineContainer(ctx context.Context, cfg Options, facts engineplan.Facts, log *slog.Logger) (*engineplan.Container, error) {
	if cfg.Image == "" {
		return nil, nil
	}
	if _, err := launch.RemoveLeftovers(ctx, facts.Runtime, log); err != nil {
		return nil, err
	}
	hf, err := engineplan.HostHFCache(os.Getenv)
	if err != nil {
		return nil, err
	}
	run := strings.ToLower(time.Now().UTC().Format("20060102t150405")) + "-" + strconv.Itoa(os.Getpid())
	cid := cfg.LogDir // the watchdogs read each container's id there (docs/container.md)
	if cid == "" {
		cid = os.TempDir()
	}
	return &engineplan.Container{Runtime: facts.Runtime, Image: cfg.Image, RunID: run, Owner: launch.Owner(), HFCache: hf,
		CIDDir: cid}, nil
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
func onEngineState(core *router.Core, replicasOf func(rank int) []int) func(rank int, s launch.State, reason string) {
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
		for _, r := range replicasOf(rank) {
			if restarted {
				core.NoteRestart(r)
			}
			core.SetReplicaState(r, s == launch.Ready, s.String(), reason)
		}
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

// printServeReady prints the one line scripts wait for: the URL to use;
// then, for the simulator, what its answers are (note).
func printServeReady(w io.Writer, cfg Config, policy string, note []string) {
	url := wardenproc.URL(cfg.Router.Host, strconv.Itoa(cfg.Router.Port))
	fmt.Fprintf(w, "warden: ready at %s (%d x %s, policy %s; status page %s/, logs %s)\n",
		url, cfg.DP, cfg.ServedName, policy, url, cfg.LogDir)
	for _, line := range note {
		fmt.Fprintln(w, "warden: "+line)
	}
}
