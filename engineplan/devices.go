package engineplan

import (
	"context"
	"errors"
	"fmt"
	"github.com/lmwarden/warden/gpu"
	"github.com/lmwarden/warden/hostcpu"
	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/modelinfo"
	"github.com/lmwarden/warden/sim/model"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// Request is what a run's engines are planned from: `warden serve`'s
// engine settings, checked and with their defaults (serve.Options.Config).
type Request struct {
	Model    string
	Engine   string // "vllm" or "sim"
	Device   string // "gpu" or "cpu"
	VLLMPath string // --vllm; "vllm" on PATH when empty
	DP, TP   int
	GPUs     string // --gpus: the visible set to choose from; "" all
	// CPUKVCache is --cpu-kv-cache: "auto" or a size per rank.
	CPUKVCache string
	// KVOffload is --kv-offload: "off", "auto" or a size per rank;
	// KVOffloadDefault says it was not given (auto then falls back to no
	// tier with a line saying why, where an explicit auto is an error).
	KVOffload        string
	KVOffloadDefault bool
	Tools, Reasoning string // --tools, --reasoning: "auto", "off" or a parser name
	MaxNumSeqs       int    // --max-num-seqs; 0: vLLM's own default for the devices
	Extra            []string
	// SimKVCache is the simulator's GPU KV cache in bytes for the
	// arguments `warden sim serve` would get (sim.KVCacheBytes; the command
	// layer passes it, so that planning does not import the simulator's
	// front end). Nil: unknown, and a simulated tier is sized without it.
	SimKVCache func(args []string, getenv func(string) string) (uint64, error)
	// Image is --image: vLLM's engines run from this container image, one
	// container per rank (container.go); "" a host vLLM. ContainerRuntime
	// is --container-runtime: docker, podman, or "" to detect.
	Image            string
	ContainerRuntime string
}

// Devices is what every rank runs on, found before anything starts:
// a GPU group per rank, or (--device cpu) a core set per rank and the KV
// cache size; and the max_num_seqs every engine is given.
type Devices struct {
	GPUs    [][]string    // CUDA_VISIBLE_DEVICES per rank; nil entries for the simulator
	CPUs    []hostcpu.Set // --device cpu
	KVBytes uint64        // --device cpu: --kv-cache-memory-bytes per rank; 0 when given after --
	Offload uint64        // --kv-offload: each rank's host KV tier in bytes; 0 off
	// OffloadPlan is what PlanOffload made of --kv-offload (zero when off).
	OffloadPlan OffloadPlan
	// OffloadFailed: the default --kv-offload auto could not plan a tier
	// (logged) and the engines run without one.
	OffloadFailed bool
	Seqs          int // --max-num-seqs of every engine
}

// hostMemory reads what --kv-offload auto sizes from: the memory available
// and, for vLLM (which maps a GPU engine's tier from /dev/shm), /dev/shm's
// free space. A variable, for tests.
var hostMemory = func(shm bool) (HostMemory, error) {
	avail, err := hostcpu.Available()
	if err != nil {
		return HostMemory{}, fmt.Errorf("reading the memory available: %w", err)
	}
	m := HostMemory{Available: avail}
	if shm {
		m.ShmFree, m.ShmChecked = ShmFree()
	}
	return m, nil
}

// offloadDevices sizes every rank's host KV tier (--kv-offload) from the
// host's memory, the engines' vLLM version and one rank's GPU KV cache
// (cardKV, 0 unknown; from stands for where it came from).
func offloadDevices(cfg Request, facts Facts, cardKV uint64, from string, d *Devices, log *slog.Logger) error {
	if cfg.KVOffload == "off" || cfg.KVOffload == "" {
		return nil
	}
	sim := cfg.Engine == "sim"
	mem, err := hostMemory(!sim)
	if err != nil {
		return err
	}
	plan, err := PlanOffload(OffloadRequest{Setting: cfg.KVOffload, Ranks: cfg.DP, TP: cfg.TP, Mem: mem,
		Version: facts.Version, Sim: sim, CardKV: cardKV, CardKVFrom: from})
	if err != nil && cfg.KVOffloadDefault {
		d.OffloadFailed = true
		log.Info("host KV tier off (the default --kv-offload auto): " + err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	for _, w := range plan.Warn {
		log.Warn(w)
	}
	d.Offload, d.OffloadPlan = plan.PerRank, plan
	shm := "not checked"
	if mem.ShmChecked {
		shm = hostcpu.Bytes(mem.ShmFree)
	}
	log.Info(plan.Info, "ranks", cfg.DP, "memory_available", hostcpu.Bytes(mem.Available),
		"headroom", hostcpu.Bytes(plan.Headroom), "shm_free", shm)
	return nil
}

// OffloadHint is what the overcommit warning adds when the engines run
// without a host KV tier they could have: how to turn one on, or, when
// --kv-offload auto found too little memory for a useful one, that.
func OffloadHint(cfg Request, d Devices) string {
	switch {
	case cfg.Device == "cpu" || d.Offload > 0:
		return ""
	case d.OffloadFailed:
		return "A host KV tier would keep the evicted prefixes; the default --kv-offload auto made none (the start " +
			"log says why): --kv-offload SIZE gives one."
	case d.OffloadPlan.Info != "":
		return fmt.Sprintf("A host KV tier would keep the evicted prefixes, but this host cannot give each rank "+
			"%.0f x its KV cache (the start log says what it found): fewer ranks per host, or more RAM.", OffloadUseful)
	}
	return "Or keep evicted prefixes in host RAM, loaded back instead of prefilled again: --kv-offload auto " +
		"(on the simulated reference rig at 24-32 sessions: output +59-73 %, 83-87 % of prompt tokens cached; docs/kv-offload.md)."
}

// cardKV estimates one rank's GPU KV cache before its engine starts, as
// vLLM sizes it: its cards' memory times --gpu-memory-utilization, less the
// weights (the model's files) and about 2 GiB a card for activations, CUDA
// graphs and the CUDA context; 0 when the weights or the geometry are not
// known (the model not downloaded yet). The simulator's is its profile's.
func cardKV(cfg Request, facts Facts, groups [][]gpu.Device, seqs int) (uint64, string) {
	if cfg.Engine == "sim" {
		args := append([]string{cfg.Model, "--max-num-seqs", strconv.Itoa(seqs), "--tensor-parallel-size",
			strconv.Itoa(cfg.TP)}, cfg.Extra...)
		if cfg.SimKVCache == nil {
			return 0, ""
		}
		b, err := cfg.SimKVCache(args, os.Getenv)
		if err != nil {
			return 0, ""
		}
		return b, "the simulator's profile"
	}
	if len(groups) == 0 || facts.Files.WeightBytes == 0 {
		return 0, ""
	}
	util, _, err := gpu.MemoryUtilization(cfg.Extra, facts.Version)
	if err != nil {
		return 0, ""
	}
	var budget float64
	for _, d := range groups[0] {
		budget += util*float64(d.MemTotal) - 2<<30
	}
	kv := budget - float64(facts.Files.WeightBytes)
	if kv <= 0 {
		return 0, ""
	}
	return uint64(kv), "estimated from the cards and the weights"
}

// FindDevices finds the devices for the run, and sizes the host KV tier
// from them. The simulator needs none.
func FindDevices(ctx context.Context, cfg Request, facts Facts, log *slog.Logger) (Devices, error) {
	d := Devices{GPUs: make([][]string, cfg.DP), Seqs: cfg.MaxNumSeqs}
	if names := DroppedEnv(os.Environ()); len(names) > 0 {
		log.Info("removed from every engine's environment (each rank is its own server)", "vars", strings.Join(names, ","))
	}
	if cfg.Engine == "sim" {
		if d.Seqs == 0 {
			d.Seqs = model.Profiles[model.DefaultProfile].DefaultMaxNumSeqs // the reference rig's, which the simulator models
		}
		kv, from := cardKV(cfg, facts, nil, d.Seqs)
		return d, offloadDevices(cfg, facts, kv, from, &d, log)
	}
	if cfg.Image == "" {
		if _, err := FindVLLM(cfg.VLLMPath); err != nil {
			return d, err
		}
	}
	if cfg.Device == "cpu" {
		return cpuDevices(cfg, d, log)
	}
	devs, err := gpu.Discover(ctx)
	if err != nil {
		return d, noGPUWithImage(cfg, err)
	}
	shm, shmOK := ShmFree()
	cuda, cudaSet := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	plan, err := gpu.Choose(devs, gpu.Request{DP: cfg.DP, TP: cfg.TP, GPUs: cfg.GPUs,
		CUDAVisible: cuda, CUDAVisibleSet: cudaSet, CUDADeviceOrder: os.Getenv("CUDA_DEVICE_ORDER"),
		Extra: cfg.Extra, VLLMVersion: facts.Version, ShmFree: shm, ShmChecked: shmOK})
	if err != nil {
		return d, err
	}
	plan.Log(log)
	var used []gpu.Device
	for i, g := range plan.Groups {
		d.GPUs[i] = gpu.CUDAIndices(g)
		used = append(used, g...)
	}
	if d.Seqs == 0 {
		d.Seqs = DefaultMaxNumSeqs(used)
	}
	kv, from := cardKV(cfg, facts, plan.Groups, d.Seqs)
	return d, offloadDevices(cfg, facts, kv, from, &d, log)
}

// cpuDevices cuts the warden's CPUs into one core set per rank and sizes
// each rank's KV cache (vLLM's CPU default is a share of all host RAM per
// instance, which several instances would each take).
func cpuDevices(cfg Request, d Devices, log *slog.Logger) (Devices, error) {
	topo, err := hostcpu.Discover()
	if err != nil {
		return d, err
	}
	if d.CPUs, err = hostcpu.Split(topo, cfg.DP); err != nil {
		return d, err
	}
	if d.Seqs == 0 {
		d.Seqs = CPUDefaultMaxNumSeqs
	}
	if argv.Has(cfg.Extra, "--kv-cache-memory-bytes") {
		return d, nil // the user's, verbatim
	}
	avail, err := hostcpu.Available()
	if err != nil {
		return d, fmt.Errorf("reading the memory available: %w", err)
	}
	var fits bool
	if d.KVBytes, fits, err = hostcpu.KVCache(cfg.CPUKVCache, cfg.DP, avail); err != nil {
		return d, err
	}
	if !fits {
		log.Warn("the CPU engines may not fit in memory", "kv_cache_per_rank", hostcpu.Bytes(d.KVBytes),
			"engine_overhead", hostcpu.Bytes(hostcpu.EngineOverhead), "ranks", cfg.DP, "available", hostcpu.Bytes(avail))
	}
	log.Info("CPU engines", "ranks", cfg.DP, "kv_cache_per_rank", hostcpu.Bytes(d.KVBytes),
		"memory_available", hostcpu.Bytes(avail), "cpus", topo.Summary())
	return d, nil
}

// Facts is what the warden reads before it starts any engine: the
// model's own files and the engines' vLLM version (from its dist-info,
// without running it, or from the image; "" unknown or for the simulator).
type Facts struct {
	Files   modelinfo.Files
	Version string
	// VersionFrom says where Version was read (with an Image: its label,
	// the package metadata in it, or its tag).
	VersionFrom string
	Runtime     string // with an Image: the container runtime's executable
}

// ReadFacts reads the model's files (modelinfo.Find) and the engines' vLLM
// version: the installed vLLM's, or with an Image the image's (which it
// first makes sure is on this host, and Runtime names the container
// runtime). What it cannot read it logs, or leaves unknown; the error is
// for an image that cannot be had or a missing runtime.
func ReadFacts(ctx context.Context, cfg Request, log *slog.Logger) (Facts, error) {
	var f Facts
	var err error
	if f.Files, err = modelinfo.Find(cfg.Model, os.Getenv); err != nil {
		log.Warn("cannot read the model's files; choosing by its name", "err", err)
	}
	if cfg.Image != "" {
		if f.Runtime, err = FindRuntime(cfg.ContainerRuntime); err != nil {
			return f, err
		}
		if err := CheckImage(ctx, f.Runtime, cfg.Image, log); err != nil {
			return f, err
		}
		if f.Version, f.VersionFrom = ImageVersion(ctx, f.Runtime, cfg.Image); f.Version != "" {
			log.Info("engine image", "image", cfg.Image, "runtime", f.Runtime, "vllm_version", f.Version, "read_from", f.VersionFrom)
		} else {
			log.Warn("engine image: its vLLM version could not be read (no "+LabelVLLMVersion+" label, no python3 "+
				"with vllm in it, no version tag); the per-version rules take it as unknown", "image", cfg.Image)
		}
		return f, nil
	}
	if cfg.Engine == "vllm" {
		if exe, err := FindVLLM(cfg.VLLMPath); err == nil {
			f.Version = InstalledVersion(exe)
		}
	}
	return f, nil
}

// ChooseFlags decides what every engine is started with beyond its rank's
// devices, from the model's own files and the engines' vLLM version: the
// tool-calling flags (--tools, --reasoning) and the context
// (--max-model-len auto where vLLM has it). It logs the decisions.
func ChooseFlags(cfg Request, facts Facts, log *slog.Logger) (ToolsChoice, ContextChoice) {
	files, version := facts.Files, facts.Version
	sim := cfg.Engine == "sim"
	c := ChooseTools(ToolsRequest{Tools: cfg.Tools, Reasoning: cfg.Reasoning, Extra: cfg.Extra,
		Files: files, Version: version, Sim: sim})
	log.Info(c.Info)
	for _, w := range c.Warn {
		log.Warn(w)
	}
	ctx := ChooseContext(cfg.Extra, version, sim, files)
	log.Info(ctx.Info)
	return c, ctx
}

// noGPUWithImage rewords "no GPU" for --image, which the simulator refuses:
// the way to run an image without GPUs is vLLM's CPU build (--device cpu
// with a CPU image), not the --engine sim that gpu.ErrNoGPU names for host
// runs. errors.Is(err, gpu.ErrNoGPU) still holds.
func noGPUWithImage(cfg Request, err error) error {
	if cfg.Image == "" || !errors.Is(err, gpu.ErrNoGPU) {
		return err
	}
	return imageNoGPU{image: cfg.Image, err: err}
}

type imageNoGPU struct {
	image string
	err   error
}

func (e imageNoGPU) Error() string {
	return "no NVIDIA GPU found for --image " + e.image + " (no NVIDIA driver, NVML or nvidia-smi); without GPUs " +
		"run vLLM's CPU image with --device cpu (docs/container.md), or drop --image to use --engine sim"
}

func (e imageNoGPU) Unwrap() error { return e.err }
