package launch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/hostcpu"
)

// The host-RAM KV tier: vLLM's native KV offloading (the OffloadingConnector
// with its CPU spec) keeps KV blocks evicted from the GPU in host memory and
// loads them back when a later prompt's prefix misses on the GPU but hits
// there. The warden turns it on per rank with
//
//	--kv-offloading-backend native --kv-offloading-size <GiB>
//
// (vLLM 0.32.0, engine/arg_utils.py and config/cache.py): the size is in GiB
// (a float), for the whole engine, i.e. summed over its tensor-parallel
// workers. docs/kv-offload.md has the facts and their sources.
const (
	// OffloadBackend is the --kv-offloading-backend the warden passes.
	OffloadBackend = "native"

	// OffloadHeadroomMin and OffloadHeadroomShare are what --kv-offload
	// auto leaves of the memory available: the larger of 8 GiB and a
	// quarter of it, for the OS, the page cache the weights load through
	// and the engines' own processes (API server, EngineCore and workers,
	// each with torch and CUDA, a few GiB apiece). The tier is pinned and
	// populated up front (it cannot be swapped or reclaimed), so running
	// short means the OOM killer, not a slower engine.
	OffloadHeadroomMin   = 8 << 30
	OffloadHeadroomShare = 0.25

	// offloadShmShare is the most of /dev/shm's free space auto takes:
	// on NVIDIA GPUs vLLM maps each engine's tier from a file in /dev/shm
	// (v1/kv_offload/cpu/shared_offload_region.py) and refuses one that
	// does not fit; vLLM's own shared-memory queues need some room too.
	offloadShmShare = 0.9

	// minAutoOffload is the smallest tier auto makes per rank; offloadAlign
	// the unit auto sizes in (a binary fraction of a GiB, exact in vLLM's
	// float GiB).
	minAutoOffload = 1 << 30
	offloadAlign   = 256 << 20
)

// HostMemory is what sizing the tier reads: the memory available
// (hostcpu.Available: MemAvailable capped by the cgroup) and the free space
// of /dev/shm (ShmFree, when ShmChecked: not for the simulator, which
// maps nothing, nor where there is no /dev/shm).
type HostMemory struct {
	Available  uint64
	ShmFree    uint64
	ShmChecked bool
}

// OffloadHeadroom is what auto keeps free of avail: max(8 GiB, 25 %).
func OffloadHeadroom(avail uint64) uint64 {
	return max(uint64(OffloadHeadroomMin), uint64(float64(avail)*OffloadHeadroomShare))
}

// CheckKVOffload validates a --kv-offload setting without sizing it: off,
// auto, or a positive size (4GiB, 512MiB, 64GB).
func CheckKVOffload(setting string) error {
	switch strings.ToLower(setting) {
	case "off", "auto":
		return nil
	}
	n, err := hostcpu.ParseSize(setting)
	if err != nil {
		return fmt.Errorf("--kv-offload: %w, auto or off", err)
	}
	if n == 0 {
		return fmt.Errorf("--kv-offload 0: use --kv-offload off to run without the host KV tier")
	}
	return nil
}

// KVOffloadPerRank sizes each of ranks' host KV tier from setting (off,
// auto or a size, see CheckKVOffload) and the host's memory; 0 means off.
// auto splits what the headroom (OffloadHeadroom) leaves of the available
// memory, and at most 90 % of /dev/shm's free space when that is known,
// over the ranks, in whole 256 MiB; it is an error when that is under
// 1 GiB a rank. A given size is per rank and taken as it is, except that
// it must fit /dev/shm (when known) over all ranks, since vLLM would refuse
// it only after loading the model; warn says when it leaves less than the
// headroom of the available memory.
func KVOffloadPerRank(setting string, ranks int, mem HostMemory) (perRank uint64, warn string, err error) {
	if err := CheckKVOffload(setting); err != nil {
		return 0, "", err
	}
	if ranks < 1 {
		ranks = 1
	}
	n := uint64(ranks)
	switch strings.ToLower(setting) {
	case "off":
		return 0, "", nil
	case "auto":
		head := OffloadHeadroom(mem.Available)
		var usable uint64
		if mem.Available > head {
			usable = mem.Available - head
		}
		limit, fix := "the memory available", "free memory"
		if mem.ShmChecked {
			if shm := uint64(float64(mem.ShmFree) * offloadShmShare); shm < usable {
				usable, limit = shm, "/dev/shm's free space"
				fix = "enlarge /dev/shm (docker run --shm-size, or --ipc=host)"
			}
		}
		perRank = usable / n &^ (offloadAlign - 1)
		if perRank < minAutoOffload {
			return 0, "", fmt.Errorf("--kv-offload auto: %s leaves %s for the host KV tier of %d ranks "+
				"(%s available, %s kept for the OS and the engines; /dev/shm %s free), under %s a rank: "+
				"%s, set a size (--kv-offload 4GiB) or --kv-offload off",
				limit, hostcpu.Bytes(usable), ranks, hostcpu.Bytes(mem.Available), hostcpu.Bytes(head),
				shmText(mem), hostcpu.Bytes(minAutoOffload), fix)
		}
		return perRank, "", nil
	}
	perRank, _ = hostcpu.ParseSize(setting)
	total := perRank * n
	if mem.ShmChecked && total > mem.ShmFree {
		return 0, "", fmt.Errorf("--kv-offload %s x %d ranks needs %s in /dev/shm, which has %s free "+
			"(vLLM maps each engine's host KV tier there and would refuse it after loading the model): "+
			"lower --kv-offload, or enlarge /dev/shm (docker run --shm-size, or --ipc=host)",
			hostcpu.Bytes(perRank), ranks, hostcpu.Bytes(total), hostcpu.Bytes(mem.ShmFree))
	}
	if head := OffloadHeadroom(mem.Available); total+head > mem.Available {
		warn = fmt.Sprintf("the host KV tier (%s x %d ranks) leaves less than %s of the %s available "+
			"for the OS and the engines' own processes: the OOM killer may stop an engine",
			hostcpu.Bytes(perRank), ranks, hostcpu.Bytes(head), hostcpu.Bytes(mem.Available))
	}
	return perRank, warn, nil
}

func shmText(mem HostMemory) string {
	if !mem.ShmChecked {
		return "not checked"
	}
	return hostcpu.Bytes(mem.ShmFree)
}

// OffloadGiB formats bytes as vLLM's --kv-offloading-size: GiB as a
// decimal, exact (bytes / 2^30 is exact in a float64 below 2^53 bytes, and
// vLLM multiplies it back by 2^30).
func OffloadGiB(bytes uint64) string {
	return strconv.FormatFloat(float64(bytes)/(1<<30), 'f', -1, 64)
}
