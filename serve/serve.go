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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lmwarden/warden/gpu"
	"github.com/lmwarden/warden/hostcpu"
	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/launch"
	"github.com/lmwarden/warden/modelinfo"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/proxy/panel"
	"github.com/lmwarden/warden/sim"
)

// Options are `warden serve`'s flags as given (the command layer,
// internal/command, fills them from the flags and their WARDEN_*
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
}

// Config is everything `warden serve` needs, validated once: the options
// with their defaults filled in, the listen address and the proxy's config.
type Config struct {
	Options
	Addr  string // host:port to listen on
	Proxy proxy.Config
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
	if err := launch.CheckExtra(cfg.Extra); err != nil {
		return cfg, err
	}
	if err := launch.CheckToolSettings(cfg.Tools, cfg.Reasoning, cfg.Extra); err != nil {
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
	if cfg.Proxy, cfg.Addr, err = cfg.Router.proxyConfig(cfg.ServedName); err != nil {
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
	if err := launch.CheckKVOffload(cfg.KVOffload); err != nil {
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

// rankDevices is what every rank runs on, found before anything starts:
// a GPU group per rank, or (--device cpu) a core set per rank and the KV
// cache size; and the max_num_seqs every engine is given.
type rankDevices struct {
	gpus        [][]string    // CUDA_VISIBLE_DEVICES per rank; nil entries for the simulator
	cpus        []hostcpu.Set // --device cpu
	kvBytes     uint64        // --device cpu: --kv-cache-memory-bytes per rank; 0 when given after --
	offload     uint64        // --kv-offload: each rank's host KV tier in bytes; 0 off
	offloadPlan launch.OffloadPlan
	// offloadFailed: the default --kv-offload auto could not plan a tier
	// (logged) and the engines run without one.
	offloadFailed bool
	seqs          int
}

// hostMemory reads what --kv-offload auto sizes from: the memory available
// and, for vLLM (which maps a GPU engine's tier from /dev/shm), /dev/shm's
// free space. A variable, for tests.
var hostMemory = func(shm bool) (launch.HostMemory, error) {
	avail, err := hostcpu.Available()
	if err != nil {
		return launch.HostMemory{}, fmt.Errorf("reading the memory available: %w", err)
	}
	m := launch.HostMemory{Available: avail}
	if shm {
		m.ShmFree, m.ShmChecked = launch.ShmFree()
	}
	return m, nil
}

// offloadDevices sizes every rank's host KV tier (--kv-offload) from the
// host's memory, the engines' vLLM version and one rank's GPU KV cache
// (cardKV, 0 unknown; from stands for where it came from).
func offloadDevices(cfg Options, facts engineFacts, cardKV uint64, from string, d *rankDevices, log *slog.Logger) error {
	if cfg.KVOffload == "off" || cfg.KVOffload == "" {
		return nil
	}
	sim := cfg.Engine == "sim"
	mem, err := hostMemory(!sim)
	if err != nil {
		return err
	}
	plan, err := launch.PlanOffload(launch.OffloadRequest{Setting: cfg.KVOffload, Ranks: cfg.DP, TP: cfg.TP, Mem: mem,
		Version: facts.version, Sim: sim, CardKV: cardKV, CardKVFrom: from})
	if err != nil && cfg.KVOffloadDefault {
		d.offloadFailed = true
		log.Info("host KV tier off (the default --kv-offload auto): " + err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	for _, w := range plan.Warn {
		log.Warn(w)
	}
	d.offload, d.offloadPlan = plan.PerRank, plan
	shm := "not checked"
	if mem.ShmChecked {
		shm = hostcpu.Bytes(mem.ShmFree)
	}
	log.Info(plan.Info, "ranks", cfg.DP, "memory_available", hostcpu.Bytes(mem.Available),
		"headroom", hostcpu.Bytes(plan.Headroom), "shm_free", shm)
	return nil
}

// offloadHint is what the overcommit warning adds when the engines run
// without a host KV tier they could have: how to turn one on, or, when
// --kv-offload auto found too little memory for a useful one, that.
func offloadHint(cfg Options, d rankDevices) string {
	switch {
	case cfg.Device == "cpu" || d.offload > 0:
		return ""
	case d.offloadFailed:
		return "A host KV tier would keep the evicted prefixes; the default --kv-offload auto made none (the start " +
			"log says why): --kv-offload SIZE gives one."
	case d.offloadPlan.Info != "":
		return fmt.Sprintf("A host KV tier would keep the evicted prefixes, but this host cannot give each rank "+
			"%.0f x its KV cache (the start log says what it found): fewer ranks per host, or more RAM.", launch.OffloadUseful)
	}
	return "Or keep evicted prefixes in host RAM, loaded back instead of prefilled again: --kv-offload auto " +
		"(on the simulated reference rig at 24-32 sessions: output +59-73 %, 83-87 % of prompt tokens cached; docs/kv-offload.md)."
}

// cardKV estimates one rank's GPU KV cache before its engine starts, as
// vLLM sizes it: its cards' memory times --gpu-memory-utilization, less the
// weights (the model's files) and about 2 GiB a card for activations, CUDA
// graphs and the CUDA context; 0 when the weights or the geometry are not
// known (the model not downloaded yet). The simulator's is its profile's.
func cardKV(cfg Options, facts engineFacts, groups [][]gpu.Device, seqs int) (uint64, string) {
	if cfg.Engine == "sim" {
		args := append([]string{cfg.Model, "--max-num-seqs", strconv.Itoa(seqs), "--tensor-parallel-size",
			strconv.Itoa(cfg.TP)}, cfg.Extra...)
		b, err := sim.KVCacheBytes(args, os.Getenv)
		if err != nil {
			return 0, ""
		}
		return b, "the simulator's profile"
	}
	if len(groups) == 0 || facts.files.WeightBytes == 0 {
		return 0, ""
	}
	util, _, err := gpu.MemoryUtilization(cfg.Extra, facts.version)
	if err != nil {
		return 0, ""
	}
	var budget float64
	for _, d := range groups[0] {
		budget += util*float64(d.MemTotal) - 2<<30
	}
	kv := budget - float64(facts.files.WeightBytes)
	if kv <= 0 {
		return 0, ""
	}
	return uint64(kv), "estimated from the cards and the weights"
}

// engineDevices finds the devices for the run, and sizes the host KV tier
// from them. The simulator needs none.
func engineDevices(ctx context.Context, cfg Options, facts engineFacts, log *slog.Logger) (rankDevices, error) {
	d := rankDevices{gpus: make([][]string, cfg.DP), seqs: cfg.MaxNumSeqs}
	if names := launch.DroppedEnv(os.Environ()); len(names) > 0 {
		log.Info("removed from every engine's environment (each rank is its own server)", "vars", strings.Join(names, ","))
	}
	if cfg.Engine == "sim" {
		if d.seqs == 0 {
			d.seqs = simDefaultMaxNumSeqs
		}
		kv, from := cardKV(cfg, facts, nil, d.seqs)
		return d, offloadDevices(cfg, facts, kv, from, &d, log)
	}
	if _, err := launch.FindVLLM(cfg.VLLMPath); err != nil {
		return d, err
	}
	if cfg.Device == "cpu" {
		return cpuDevices(cfg, d, log)
	}
	devs, err := gpu.Discover(ctx)
	if err != nil {
		return d, err
	}
	shm, shmOK := launch.ShmFree()
	cuda, cudaSet := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	plan, err := gpu.Choose(devs, gpu.Request{DP: cfg.DP, TP: cfg.TP, GPUs: cfg.GPUs,
		CUDAVisible: cuda, CUDAVisibleSet: cudaSet, CUDADeviceOrder: os.Getenv("CUDA_DEVICE_ORDER"),
		Extra: cfg.Extra, VLLMVersion: facts.version, ShmFree: shm, ShmChecked: shmOK})
	if err != nil {
		return d, err
	}
	plan.Log(log)
	var used []gpu.Device
	for i, g := range plan.Groups {
		d.gpus[i] = gpu.CUDAIndices(g)
		used = append(used, g...)
	}
	if d.seqs == 0 {
		d.seqs = launch.DefaultMaxNumSeqs(used)
	}
	kv, from := cardKV(cfg, facts, plan.Groups, d.seqs)
	return d, offloadDevices(cfg, facts, kv, from, &d, log)
}

// cpuDevices cuts the warden's CPUs into one core set per rank and sizes
// each rank's KV cache (vLLM's CPU default is a share of all host RAM per
// instance, which several instances would each take).
func cpuDevices(cfg Options, d rankDevices, log *slog.Logger) (rankDevices, error) {
	topo, err := hostcpu.Discover()
	if err != nil {
		return d, err
	}
	if d.cpus, err = hostcpu.Split(topo, cfg.DP); err != nil {
		return d, err
	}
	if d.seqs == 0 {
		d.seqs = launch.CPUDefaultMaxNumSeqs
	}
	if argv.Has(cfg.Extra, "--kv-cache-memory-bytes") {
		return d, nil // the user's, verbatim
	}
	avail, err := hostcpu.Available()
	if err != nil {
		return d, fmt.Errorf("reading the memory available: %w", err)
	}
	var fits bool
	if d.kvBytes, fits, err = hostcpu.KVCache(cfg.CPUKVCache, cfg.DP, avail); err != nil {
		return d, err
	}
	if !fits {
		log.Warn("the CPU engines may not fit in memory", "kv_cache_per_rank", hostcpu.Bytes(d.kvBytes),
			"engine_overhead", hostcpu.Bytes(hostcpu.EngineOverhead), "ranks", cfg.DP, "available", hostcpu.Bytes(avail))
	}
	log.Info("CPU engines", "ranks", cfg.DP, "kv_cache_per_rank", hostcpu.Bytes(d.kvBytes),
		"memory_available", hostcpu.Bytes(avail), "cpus", topo.Summary())
	return d, nil
}

// engineFacts is what the warden reads before it starts any engine: the
// model's own files and the engines' vLLM version (from its dist-info,
// without running it; "" unknown or for the simulator).
type engineFacts struct {
	files   modelinfo.Files
	version string
}

func readEngineFacts(cfg Options, log *slog.Logger) engineFacts {
	var f engineFacts
	var err error
	if f.files, err = modelinfo.Find(cfg.Model, os.Getenv); err != nil {
		log.Warn("cannot read the model's files; choosing by its name", "err", err)
	}
	if cfg.Engine == "vllm" {
		if exe, err := launch.FindVLLM(cfg.VLLMPath); err == nil {
			f.version = launch.InstalledVersion(exe)
		}
	}
	return f
}

// engineOptions decides what every engine is started with beyond its rank's
// devices, from the model's own files and the engines' vLLM version: the
// tool-calling flags (--tools, --reasoning) and the context
// (--max-model-len auto where vLLM has it). It logs the decisions; setup is
// what the status reports of them.
func engineOptions(cfg Options, facts engineFacts, log *slog.Logger) (launch.ToolsChoice, launch.ContextChoice, *panel.EngineSetup) {
	files, version := facts.files, facts.version
	sim := cfg.Engine == "sim"
	c := launch.ChooseTools(launch.ToolsRequest{Tools: cfg.Tools, Reasoning: cfg.Reasoning, Extra: cfg.Extra,
		Files: files, Version: version, Sim: sim})
	log.Info(c.Info)
	for _, w := range c.Warn {
		log.Warn(w)
	}
	ctx := launch.ChooseContext(cfg.Extra, version, sim, files)
	log.Info(ctx.Info)
	setup := &panel.EngineSetup{ToolCallParser: c.ToolParser, AutoToolChoice: c.ToolParser != "",
		ReasoningParser: c.ReasoningParser, Tools: c.Info, ToolsFix: c.Fix}
	if c.FromExtra {
		setup.ToolCallParser, _ = argv.Value(cfg.Extra, "--tool-call-parser")
		setup.AutoToolChoice = argv.Has(cfg.Extra, "--enable-auto-tool-choice")
	}
	if v, ok := argv.Value(cfg.Extra, "--reasoning-parser"); ok {
		setup.ReasoningParser = v
	}
	return c, ctx, setup
}

// simDefaultMaxNumSeqs is the reference rig's max_num_seqs, which the
// simulator's default profile models.
const simDefaultMaxNumSeqs = 32

// engineSpecs builds one launch spec and one proxy backend per rank.
func engineSpecs(cfg Options, d rankDevices, tools launch.ToolsChoice, fit launch.ContextChoice) ([]launch.Spec, []proxy.Backend, error) {
	free, err := ports.Free(cfg.DP, "127.0.0.1")
	if err != nil {
		return nil, nil, fmt.Errorf("finding %d free loopback ports: %w", cfg.DP, err)
	}
	eng := launch.Engine{Kind: cfg.Engine, VLLMPath: cfg.VLLMPath, Model: cfg.Model,
		ServedName: cfg.ServedName, MaxNumSeqs: d.seqs, TP: cfg.TP, KVBytes: d.kvBytes, OffloadBytes: d.offload,
		ToolFlags: tools.Flags(), MaxModelLen: fit.MaxModelLen, Extra: cfg.Extra}
	specs := make([]launch.Spec, cfg.DP)
	backends := make([]proxy.Backend, cfg.DP)
	for i := range specs {
		specs[i] = launch.Spec{Rank: i, Argv: eng.Argv(free[i]), Port: free[i], GPUs: d.gpus[i],
			LogPath: filepath.Join(cfg.LogDir, "rank-"+strconv.Itoa(i)+".log")}
		backends[i] = proxy.Backend{Rank: i, URL: "http://127.0.0.1:" + strconv.Itoa(free[i]),
			GPUs: d.gpus[i], MaxNumSeqs: d.seqs}
		if i < len(d.cpus) {
			specs[i].Env = d.cpus[i].Env()
			if cfg.CPUPin != hostcpu.PinThreads {
				specs[i].CPUs = d.cpus[i].CPUs
			}
			backends[i].GPUs = []string{d.cpus[i].Label()}
		}
	}
	return specs, backends, nil
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
	cfg, err := o.Config()
	if err != nil {
		return exit.New(2, "warden serve: "+err.Error())
	}
	log := newLogger()
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	facts := readEngineFacts(cfg.Options, log)
	devices, err := engineDevices(ctx, cfg.Options, facts, log)
	if err != nil {
		return exit.New(1, "warden serve: "+err.Error())
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return exit.New(1, listenError("warden serve", cfg.Addr, err))
	}
	tools, fit, setup := engineOptions(cfg.Options, facts, log)
	setup.OffloadHint = offloadHint(cfg.Options, devices)
	if cfg.Engine == "sim" {
		setup.Simulator = sim.FirstContact(cfg.Extra)
	}
	specs, backends, err := engineSpecs(cfg.Options, devices, tools, fit)
	if err != nil {
		ln.Close()
		return exit.New(1, "warden serve: "+err.Error())
	}
	cfg.Proxy.Registry, cfg.Proxy.Logger, cfg.Proxy.Engines = newRegistry(), log, setup
	px, err := proxy.New(cfg.Proxy, backends)
	if err != nil {
		ln.Close()
		return exit.New(1, "warden serve: "+err.Error())
	}
	for _, b := range backends {
		px.SetReplicaState(b.Rank, false, "starting", "engine loading")
	}
	px.SetStarting(true)
	srv, served := startHTTP(ln, px.Handler(), log)
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go px.Run(runCtx)

	log.Info("starting engines", "engine", cfg.Engine, "device", cfg.Device, "model", cfg.Model, "dp", cfg.DP, "tp", cfg.TP,
		"max_num_seqs", devices.seqs, "log_dir", cfg.LogDir)
	group, err := launch.Start(ctx, specs, launch.Options{
		StartupTimeout: cfg.StartupTimeout, StopGrace: cfg.StopGrace, Logger: log,
		Progress: os.Stderr, OnState: onEngineState(px),
	})
	if err != nil {
		shutdownHTTP(srv, 0)
		if errors.Is(err, context.Canceled) {
			return exit.New(130, "warden serve: interrupted while engines were starting; all stopped")
		}
		return exit.New(1, "warden serve: "+err.Error())
	}
	px.CheckNow(ctx)
	px.SetStarting(false)
	if cfg.Engine == "vllm" {
		log.Info("engines ready", "vllm_version", launch.Version(ctx, backends[0].URL))
	}
	printServeReady(stdout, cfg, px.Status().Policy, setup.Simulator)

	final := drain(ctx, stopSignals, srv, served, px, cfg.Router.DrainTimeout, log)
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
