package engineplan

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/lmwarden/warden/hostcpu"
)

// Sizing the host KV tier, per vLLM version (docs/kv-offload.md, "Per vLLM
// version", has the sources, read in vLLM's PyPI wheels 0.11.0 to 0.32.0):
//
//   - the flags --kv-offloading-backend/--kv-offloading-size work from
//     0.14.0 (0.11.1 to 0.13 have them, but the engine fails at start:
//     "num_cpu_blocks must be specified in kv_connector_extra_config");
//   - up to 0.26 every worker pins its share (S/T of a tier of S over T
//     workers) as torch tensors, which PyTorch's host allocator rounds up to
//     a power of two: T x next_pow2(S/T) (17 GiB on one GPU pins 32);
//   - from 0.27 one file per engine in /dev/shm holds at most S, mapped by
//     every worker; 0.27 and 0.28 leave it behind when the engine is killed
//     (0.29 unlinks it once every worker has mapped it), which the warden
//     cleans up (shmfiles.go).
//
// A tier only helps beyond the GPU's own cache: vLLM writes every computed
// prompt block through to it and evicts by LRU, so a tier no larger than the
// card's KV cache holds mostly what the GPU holds already. How much beyond
// is worth having was measured on the simulated reference rig
// (scripts/offload-curve.sh, docs/kv-offload.md): OffloadUseful and
// OffloadTarget come from that curve.
const (
	// OffloadUseful is the smallest tier, in multiples of one rank's GPU KV
	// cache, that auto makes: below it the tier held (almost) nothing the
	// GPU did not, and auto runs without one.
	OffloadUseful = 2.0
	// OffloadTarget is the tier auto aims for, in multiples of one rank's
	// GPU KV cache, when the host has the memory: past it the curve flattens.
	OffloadTarget = 4.0

	// offloadSince is the first vLLM release whose offloading flags work
	// (0.27.0, the first that backs the tier with a /dev/shm file, is
	// shmBacked's).
	offloadSince = "0.14.0"

	// Host memory of an engine's processes beyond the tier, for the
	// headroom: its API server and EngineCore together, and each worker
	// (one per tensor-parallel GPU). Estimates: vLLM 0.32's CPU build
	// measured 0.9 + 0.9 GiB idle and 2 GiB a worker with a 1 GiB KV cache;
	// CUDA builds hold more (torch's CUDA libraries, NCCL).
	engineProcBytes = 3 << 30
	workerProcBytes = 3 << 30
	// osHeadroomBytes is what the headroom keeps for the OS and the page
	// cache the weights load through, besides the engines.
	osHeadroomBytes = 4 << 30
)

// OffloadRequest is what PlanOffload sizes the tier from.
type OffloadRequest struct {
	Setting string     // --kv-offload: off, auto, or a size per rank
	Ranks   int        // --dp
	TP      int        // GPUs (workers) per rank
	Mem     HostMemory // the host's memory and /dev/shm
	// Version is the engines' vLLM version ("" unknown); Sim the simulator,
	// which holds no host memory but is sized as if it did (it models vLLM
	// 0.32, so that a simulated run shows what the real one would do).
	Version string
	Sim     bool
	// CardKV is one rank's GPU KV cache in bytes (over its TP cards), 0 when
	// not known; CardKVFrom says where it came from, for the log.
	CardKV     uint64
	CardKVFrom string
}

// OffloadPlan is the tier each rank gets.
type OffloadPlan struct {
	PerRank  uint64 // --kv-offloading-size of each rank; 0: no tier
	Pinned   uint64 // host memory one rank's tier holds (more than PerRank before vLLM 0.27)
	Headroom uint64 // what the plan keeps free of the memory available
	Info     string // one line for the start log
	Warn     []string
	// ShmFile: the engines back the tier with a /dev/shm file (vLLM 0.27
	// and later, the simulator), which the warden removes if a killed engine
	// leaves it behind.
	ShmFile bool
}

// OffloadHeadroomFor is what the tier leaves free of avail for ranks
// engines of tp workers each: the larger of 8 GiB, a quarter of avail, and
// 4 GiB for the OS plus every engine process's own memory.
func OffloadHeadroomFor(avail uint64, ranks, tp int) uint64 {
	procs := uint64(osHeadroomBytes) + uint64(max(ranks, 1))*(engineProcBytes+uint64(max(tp, 1))*workerProcBytes)
	return max(OffloadHeadroom(avail), procs)
}

// PinnedSize is the host memory a tier of size bytes holds in vLLM version
// over tp workers: exactly size from 0.27 (one /dev/shm file), else each
// worker's share rounded up to a power of two by PyTorch's pinned-memory
// allocator.
func PinnedSize(size uint64, tp int, version string) uint64 {
	if size == 0 || shmBacked(version) {
		return size
	}
	t := uint64(max(tp, 1))
	return t * nextPow2((size+t-1)/t)
}

func nextPow2(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	return 1 << (64 - bits.LeadingZeros64(n-1))
}

func prevPow2(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	return 1 << (63 - bits.LeadingZeros64(n))
}

// shmBacked: vLLM version maps the tier from /dev/shm (0.27 and later; an
// unknown version is taken as the newest).
func shmBacked(version string) bool {
	at, ok := VersionAtLeast(version, 0, 27, 0)
	return at || !ok
}

// PlanOffload sizes every rank's host KV tier (see the file comment).
func PlanOffload(r OffloadRequest) (OffloadPlan, error) {
	setting := strings.ToLower(strings.TrimSpace(r.Setting))
	if err := CheckKVOffload(setting); err != nil {
		return OffloadPlan{}, err
	}
	if setting == "off" || setting == "" {
		return OffloadPlan{}, nil
	}
	version := r.Version
	if r.Sim {
		version = "0.32.0"
	}
	if at, ok := VersionAtLeast(version, 0, 14, 0); ok && !at {
		return OffloadPlan{}, fmt.Errorf("--kv-offload with vLLM %s: its offloading flags work from vLLM %s "+
			"(0.11.1 to 0.13 fail at start with \"num_cpu_blocks must be specified\"): upgrade vLLM, or run with --kv-offload off",
			version, offloadSince)
	}
	ranks, tp := uint64(max(r.Ranks, 1)), max(r.TP, 1)
	p := OffloadPlan{ShmFile: shmBacked(version), Headroom: OffloadHeadroomFor(r.Mem.Available, r.Ranks, tp)}
	card := ""
	if r.CardKV > 0 {
		card = fmt.Sprintf("; a card's KV cache %s (%s)", hostcpu.Bytes(r.CardKV), r.CardKVFrom)
	}
	if setting == "auto" {
		per, off, err := autoTier(r, p.ShmFile, p.Headroom, version, card)
		if err != nil {
			return OffloadPlan{}, err
		}
		if off != "" {
			p.Info = off
			return p, nil
		}
		p.PerRank = per
	} else {
		p.PerRank, _ = hostcpu.ParseSize(setting)
		if version == "" && !r.Sim {
			p.Warn = append(p.Warn, "the engines' vLLM version could not be read: the host KV tier is checked as "+
				"vLLM 0.27 and later allocate it (one /dev/shm file of exactly that size); earlier releases pin up "+
				"to twice as much")
		}
	}
	p.Pinned = PinnedSize(p.PerRank, tp, version)
	total := p.Pinned * ranks
	if p.ShmFile && r.Mem.ShmChecked && total > r.Mem.ShmFree && !r.Sim {
		return OffloadPlan{}, fmt.Errorf("--kv-offload %s x %d ranks needs %s in /dev/shm, which has %s free "+
			"(vLLM maps each engine's host KV tier there and would refuse it after loading the model): "+
			"lower --kv-offload, or enlarge /dev/shm (docker run --shm-size, or --ipc=host)",
			hostcpu.Bytes(p.PerRank), ranks, hostcpu.Bytes(total), hostcpu.Bytes(r.Mem.ShmFree))
	}
	if p.Pinned > p.PerRank {
		fit := alignTier(p.PerRank, tp, version)
		p.Warn = append(p.Warn, fmt.Sprintf("vLLM %s pins %s for a host KV tier of %s a rank (PyTorch rounds each "+
			"worker's pinned share up to a power of two); --kv-offload %s would pin no more than it uses",
			version, hostcpu.Bytes(p.Pinned), hostcpu.Bytes(p.PerRank), hostcpu.Bytes(fit)))
	}
	if total+p.Headroom > r.Mem.Available && !r.Sim {
		p.Warn = append(p.Warn, fmt.Sprintf("the host KV tier (%s pinned x %d ranks) leaves less than %s of the %s "+
			"available for the OS and the engines' own processes: the OOM killer may stop an engine",
			hostcpu.Bytes(p.Pinned), ranks, hostcpu.Bytes(p.Headroom), hostcpu.Bytes(r.Mem.Available)))
	}
	if r.CardKV > 0 && float64(p.PerRank) < OffloadUseful*float64(r.CardKV) && setting != "auto" {
		p.Warn = append(p.Warn, fmt.Sprintf("--kv-offload %s is under %.0f x a card's KV cache (%s): vLLM writes every "+
			"prompt block through to the tier and evicts by LRU, so it holds mostly what the GPU already has "+
			"(docs/kv-offload.md); the engines run with it as given", hostcpu.Bytes(p.PerRank), OffloadUseful,
			hostcpu.Bytes(r.CardKV)))
	}
	p.Info = fmt.Sprintf("host KV tier (vLLM native KV offloading): %s a rank (%s), %s pinned%s; turn it off with "+
		"--kv-offload off", hostcpu.Bytes(p.PerRank), r.Setting, hostcpu.Bytes(p.Pinned), card)
	return p, nil
}

// autoTier sizes one rank's tier for --kv-offload auto: what the host can
// spare (the memory available, or /dev/shm's free space when the tier is a
// file there, less headroom) over the ranks, at most OffloadTarget x a
// card's KV cache. off says why there is no tier when that is under what a
// tier needs to hold more than the GPU does ("" when there is one).
func autoTier(r OffloadRequest, shmFile bool, headroom uint64, version, card string) (per uint64, off string, err error) {
	if version == "" {
		return 0, "", fmt.Errorf("--kv-offload auto: the engines' vLLM version could not be read, and " +
			"how much host memory a tier takes depends on it (pinned tensors rounded up to a power of two " +
			"before 0.27, an exact /dev/shm file after): give a size (--kv-offload 16GiB) or --kv-offload off")
	}
	ranks, tp := uint64(max(r.Ranks, 1)), max(r.TP, 1)
	var usable uint64
	if r.Mem.Available > headroom {
		usable = r.Mem.Available - headroom
	}
	limit := "the memory available"
	if shmFile && r.Mem.ShmChecked {
		if shm := uint64(float64(r.Mem.ShmFree) * offloadShmShare); shm < usable {
			usable, limit = shm, "/dev/shm's free space"
		}
	}
	budget := usable / ranks
	want := budget
	if r.CardKV > 0 {
		want = min(budget, uint64(OffloadTarget*float64(r.CardKV)))
	}
	per = alignTier(want, tp, version)
	floor := uint64(minAutoOffload)
	if r.CardKV > 0 {
		floor = max(floor, uint64(OffloadUseful*float64(r.CardKV)))
	}
	if per < floor {
		return 0, fmt.Sprintf("host KV tier off: --kv-offload auto finds %s a rank (%s %s less %s kept for the "+
			"OS and the engines, over %d ranks)%s; a tier needs %s a rank to hold more than the GPU already "+
			"does (%.0f x its KV cache, docs/kv-offload.md), so the engines run without one (--kv-offload SIZE forces one)",
			hostcpu.Bytes(per), limit, hostcpu.Bytes(availOrShm(r.Mem, limit)), hostcpu.Bytes(headroom), ranks,
			card, hostcpu.Bytes(floor), OffloadUseful), nil
	}
	return per, "", nil
}

// alignTier rounds a tier size down to what vLLM version holds without
// waste: whole 256 MiB from 0.27 (an exact file), a power of two per worker
// before (and at least 256 MiB a worker).
func alignTier(size uint64, tp int, version string) uint64 {
	if shmBacked(version) {
		return size &^ (offloadAlign - 1)
	}
	t := uint64(max(tp, 1))
	per := prevPow2(size / t)
	if per < offloadAlign {
		return 0
	}
	return per * t
}

func availOrShm(m HostMemory, limit string) uint64 {
	if strings.Contains(limit, "shm") {
		return m.ShmFree
	}
	return m.Available
}
