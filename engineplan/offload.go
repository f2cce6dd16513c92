package engineplan

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

// OffloadGiB formats bytes as vLLM's --kv-offloading-size: GiB as a
// decimal, exact (bytes / 2^30 is exact in a float64 below 2^53 bytes, and
// vLLM multiplies it back by 2^30).
func OffloadGiB(bytes uint64) string {
	return strconv.FormatFloat(float64(bytes)/(1<<30), 'f', -1, 64)
}
