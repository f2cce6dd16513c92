package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Path ranks, lower is better. An unknown path (no topology from the
// driver) ranks between the host bridge and the NUMA node, equal for every
// pair, so that without topology the cards keep their order.
const (
	rankNVLink  = 0 // minus the link count, so more links rank better
	rankPIX     = 20
	rankPXB     = 30
	rankPHB     = 40
	rankUnknown = 45
	rankNODE    = 50
	rankSYS     = 60
)

// pathRank ranks an nvidia-smi topo path.
func pathRank(p string) int {
	switch {
	case strings.HasPrefix(p, "NV"):
		n, _ := strconv.Atoi(strings.TrimPrefix(p, "NV"))
		return rankNVLink - min(n, 18)
	case p == "PIX":
		return rankPIX
	case p == "PXB":
		return rankPXB
	case p == "PHB":
		return rankPHB
	case p == "NODE":
		return rankNODE
	case p == "SYS":
		return rankSYS
	}
	return rankUnknown
}

// path is the link from a to b as the driver reported it ("" unknown).
func path(a, b Device) string {
	for _, l := range a.Links {
		if l.GPU == b.Index {
			return l.Path
		}
	}
	for _, l := range b.Links {
		if l.GPU == a.Index {
			return l.Path
		}
	}
	return ""
}

// groupScore is a group's worst pair rank and the sum of its pair ranks.
func groupScore(g []Device) (worst, sum int) {
	for i := range g {
		for j := i + 1; j < len(g); j++ {
			r := pathRank(path(g[i], g[j]))
			worst = max(worst, r)
			sum += r
		}
	}
	return worst, sum
}

// groupPath names a group's weakest link, e.g. "NV4" or "SYS", "unknown"
// when the driver did not say.
func groupPath(g []Device) string {
	worst, name := -1000, "unknown"
	for i := range g {
		for j := i + 1; j < len(g); j++ {
			p := path(g[i], g[j])
			if r := pathRank(p); r > worst {
				worst = r
				name = p
				if p == "" {
					name = "unknown"
				}
			}
		}
	}
	return name
}

// groupByTopology cuts devs (at least dp x tp of them) into dp groups of tp.
// With tp 1 rank r gets the r-th card. With tp > 1 each group, in turn, is
// the best-linked set of tp cards left: for every seed, the card with the
// best worst link to the group so far is added until tp (greedy), and the
// seed whose group has the best worst link, then the best sum, wins; ties
// keep devs' order, so cards without topology are cut in order (0,1 | 2,3).
// Within a group the cards keep devs' order.
func groupByTopology(devs []Device, dp, tp int) [][]Device {
	groups := make([][]Device, 0, dp)
	if tp == 1 {
		for r := 0; r < dp; r++ {
			groups = append(groups, []Device{devs[r]})
		}
		return groups
	}
	left := append([]Device(nil), devs...)
	for r := 0; r < dp; r++ {
		var best []int // positions in left
		bestWorst, bestSum := 0, 0
		for seed := range left {
			g := []int{seed}
			for len(g) < tp {
				pick, pw, ps := -1, 0, 0
				for c := range left {
					if containsInt(g, c) {
						continue
					}
					w, s := groupScore(pick2(left, append(g, c)))
					if pick < 0 || w < pw || (w == pw && s < ps) {
						pick, pw, ps = c, w, s
					}
				}
				g = append(g, pick)
			}
			w, s := groupScore(pick2(left, g))
			if best == nil || w < bestWorst || (w == bestWorst && s < bestSum) {
				best, bestWorst, bestSum = g, w, s
			}
		}
		var group, rest []Device
		for i, d := range left {
			if containsInt(best, i) {
				group = append(group, d)
			} else {
				rest = append(rest, d)
			}
		}
		groups = append(groups, group)
		left = rest
	}
	return groups
}

func pick2(devs []Device, at []int) []Device {
	out := make([]Device, len(at))
	for i, p := range at {
		out[i] = devs[p]
	}
	return out
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// crossesSockets says how a group spans CPU sockets ("" when it does not,
// or nothing says so): a SYS path between two of its cards, else different
// NUMA nodes, else (NUMA unknown) different nearest-CPU sets.
func crossesSockets(g []Device) string {
	for i := range g {
		for j := i + 1; j < len(g); j++ {
			a, b := g[i], g[j]
			switch {
			case path(a, b) == "SYS":
				return fmt.Sprintf("GPU %d and GPU %d are linked through SYS, the inter-socket link", a.Index, b.Index)
			case a.NUMANode != nil && b.NUMANode != nil && *a.NUMANode != *b.NUMANode:
				return fmt.Sprintf("GPU %d is on NUMA node %d, GPU %d on node %d", a.Index, *a.NUMANode, b.Index, *b.NUMANode)
			case (a.NUMANode == nil || b.NUMANode == nil) && a.CPUAffinity != "" && b.CPUAffinity != "" &&
				a.CPUAffinity != b.CPUAffinity:
				return fmt.Sprintf("GPU %d's nearest CPUs are %s, GPU %d's %s", a.Index, a.CPUAffinity, b.Index, b.CPUAffinity)
			}
		}
	}
	return ""
}

// Shared memory an engine with --tp T maps under /dev/shm, from vLLM
// 0.32.0's source (distributed/device_communicators/shm_broadcast.py: a
// ShmRingBuffer is max_chunks x (max_chunk_bytes + 1 + readers) bytes):
//
//   - the executor's scheduler-output queue to its T workers
//     (v1/executor/multiproc_executor.py): 10 chunks (MessageQueue's
//     default) of VLLM_MQ_MAX_CHUNK_BYTES_MB, 16 MiB by default;
//   - each worker's response queue, MessageQueue(1, 1): 10 chunks of 24 MiB
//     (MessageQueue's default max_chunk_bytes);
//   - the tensor-parallel group's broadcaster (distributed/parallel_state.py,
//     GroupCoordinator with use_message_queue_broadcaster): 6 chunks of
//     4 MiB.
//
// That is 184 MiB + 240 MiB x T a replica (664 MiB at T 2, 1.1 GiB at T 4).
// The segments are sparse (tmpfs pages are taken as messages are written),
// so this is what may be used, not what is used at once. NCCL adds its own
// segments (its SHM transport and proxy buffers, sized by topology and
// channels); those are not counted: that part of the threshold is a
// judgement. An engine with --tp 1 runs in one process and maps none of it.
const (
	shmPerReplica = 184 << 20
	shmPerWorker  = 240 << 20
)

// ShmNeed is the shared memory dp engines of tp cards each may map (0 for
// tp 1): vLLM's message queues as counted above.
func ShmNeed(dp, tp int) uint64 {
	if tp <= 1 {
		return 0
	}
	return uint64(dp) * (shmPerReplica + uint64(tp)*shmPerWorker)
}

// shmWarning warns, for --tp > 1, when /dev/shm has less free space than
// ShmNeed (Docker's default /dev/shm is 64 MiB).
func shmWarning(req Request) string {
	need := ShmNeed(req.DP, req.TP)
	if need == 0 || !req.ShmChecked || req.ShmFree >= need {
		return ""
	}
	return fmt.Sprintf("/dev/shm has %s free, but --tp %d engines map up to %s there (vLLM's queues between an engine's "+
		"processes, %s a replica x --dp %d) plus NCCL's own segments; with too little they die at start or under load "+
		"(Bus error, or NCCL's \"unhandled system error\"); run the container with --shm-size=16g or --ipc=host "+
		"(Docker's default is 64 MiB)",
		Bytes(req.ShmFree), req.TP, Bytes(need), Bytes(ShmNeed(1, req.TP)), req.DP)
}

// Bytes formats a size as "64 MiB" below 1 GiB, else as GiB does.
func Bytes(b uint64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return GiB(b)
}
