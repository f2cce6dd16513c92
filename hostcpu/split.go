package hostcpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// Set is one rank's share of the host: the logical CPUs its processes may
// run on and the ones vLLM binds its OpenMP compute threads to.
type Set struct {
	Rank  int   `json:"rank"`
	CPUs  []int `json:"cpus"`  // the affinity mask of the rank's processes: whole physical cores
	Bind  []int `json:"bind"`  // VLLM_CPU_OMP_THREADS_BIND: one logical CPU per physical core, less a reserved one
	Nodes []int `json:"nodes"` // NUMA nodes the cores are on (CPU_VISIBLE_MEMORY_NODES)
}

// How a CPU rank is held to its cores (serve's --cpu-pin).
const (
	// PinCores confines every process of the rank (API server, engine
	// core, compute threads) to its cores: ranks cannot disturb each other.
	PinCores = "cores"
	// PinThreads binds only vLLM's OpenMP compute threads
	// (VLLM_CPU_OMP_THREADS_BIND) and leaves the rank's API server and
	// engine-core threads free to run on any core the warden may use, as
	// `vllm serve --data-parallel-size` leaves its own.
	PinThreads = "threads"
)

// ReserveFrom is the number of physical cores from which a rank keeps one
// core free of compute threads, for its API server and engine-core
// frontends (vLLM's own automatic binding reserves one the same way).
const ReserveFrom = 4

// Env is the rank's engine environment: vLLM's CPU thread binding and
// visible memory nodes.
func (s Set) Env() []string {
	nodes := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		nodes[i] = strconv.Itoa(n)
	}
	return []string{BindEnv + "=" + FormatList(s.Bind), NodesEnv + "=" + strings.Join(nodes, ",")}
}

// BindEnv and NodesEnv are the environment variables Env sets: the cores
// vLLM's CPU worker binds its threads to (one list per rank, separated by
// "|", for a server of several ranks) and the NUMA nodes it allocates on.
const (
	BindEnv  = "VLLM_CPU_OMP_THREADS_BIND"
	NodesEnv = "CPU_VISIBLE_MEMORY_NODES"
)

// Label is how the rank's cores are shown: "CPU 0-3" (node 1 when not 0).
func (s Set) Label() string {
	l := "CPU " + FormatList(s.CPUs)
	if len(s.Nodes) == 1 && s.Nodes[0] != 0 {
		l += " node " + strconv.Itoa(s.Nodes[0])
	}
	return l
}

// Split cuts the usable physical cores into dp sets. With several NUMA
// nodes the ranks are spread over them (rank r on node r*nodes/dp, cores of
// a node split evenly among its ranks), so that no rank spans two nodes
// unless there are fewer ranks than nodes (then a rank takes whole nodes).
// Each rank gets whole physical cores, SMT siblings together; cores that
// do not divide evenly go to the lower ranks. Fewer physical cores than
// ranks is an error that says what was found.
func Split(t Topology, dp int) ([]Set, error) {
	if dp < 1 {
		return nil, fmt.Errorf("--dp must be at least 1, got %d", dp)
	}
	cores := t.Cores()
	if len(cores) < dp {
		return nil, fmt.Errorf("--dp %d needs at least %d physical CPU cores, one per rank, but the warden may use %d (%s); "+
			"lower --dp", dp, dp, len(cores), t.describe())
	}
	byNode := map[int][][]CPU{}
	for _, c := range cores {
		byNode[c[0].Node] = append(byNode[c[0].Node], c)
	}
	nodes := make([]int, 0, len(t.Nodes))
	for _, n := range t.Nodes {
		if len(byNode[n.ID]) > 0 {
			nodes = append(nodes, n.ID)
		}
	}
	sets := make([]Set, dp)
	if len(nodes) == 1 {
		return dealInto(sets, 0, cores, dp)
	}
	if dp < len(nodes) {
		// Fewer ranks than nodes: rank r takes nodes [r*nodes/dp, (r+1)*nodes/dp).
		for r := range sets {
			var cs [][]CPU
			for _, n := range nodes[r*len(nodes)/dp : (r+1)*len(nodes)/dp] {
				cs = append(cs, byNode[n]...)
			}
			if _, err := dealInto(sets, r, cs, 1); err != nil {
				return nil, err
			}
		}
		return sets, nil
	}
	// At least as many ranks as nodes: rank r lives on node r*len(nodes)/dp.
	first := 0
	for i, n := range nodes {
		last := first
		for last < dp && last*len(nodes)/dp == i {
			last++
		}
		count := last - first
		if len(byNode[n]) < count {
			return nil, fmt.Errorf("--dp %d puts %d ranks on NUMA node %d, which has %d usable physical cores (%s); "+
				"lower --dp", dp, count, n, len(byNode[n]), t.describe())
		}
		if _, err := dealInto(sets, first, byNode[n], count); err != nil {
			return nil, err
		}
		first = last
	}
	return sets, nil
}

// dealInto gives cores to sets[from : from+n] in contiguous runs, the
// remainder to the lower ranks.
func dealInto(sets []Set, from int, cores [][]CPU, n int) ([]Set, error) {
	per, extra := len(cores)/n, len(cores)%n
	at := 0
	for i := 0; i < n; i++ {
		k := per
		if i < extra {
			k++
		}
		if k == 0 {
			return nil, fmt.Errorf("rank %d would get no CPU core", from+i)
		}
		s := &sets[from+i]
		s.Rank = from + i
		seen := map[int]bool{}
		mine := cores[at : at+k]
		for j, core := range mine {
			for _, c := range core {
				s.CPUs = append(s.CPUs, c.ID)
			}
			if !seen[core[0].Node] {
				seen[core[0].Node] = true
				s.Nodes = append(s.Nodes, core[0].Node)
			}
			if len(mine) >= ReserveFrom && j == len(mine)-1 {
				continue // the reserved core: frontends only
			}
			s.Bind = append(s.Bind, core[0].ID)
		}
		at += k
	}
	return sets, nil
}

// describe says which CPUs the warden may use, for error messages.
func (t Topology) describe() string {
	ids := make([]int, len(t.CPUs))
	for i, c := range t.CPUs {
		ids[i] = c.ID
	}
	s := fmt.Sprintf("logical CPUs %s on %d NUMA node(s)", FormatList(ids), len(t.Nodes))
	if t.Restricted {
		s += fmt.Sprintf(", restricted by the affinity mask from %d online", t.Online)
	}
	return s
}

// ParseSize reads a memory size such as "4GiB", "512 MiB", "2G" or a plain
// byte count.
func ParseSize(s string) (uint64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (e.g. 4GiB, 512MiB)", s)
	}
	return n, nil
}

// Bytes formats n as "4.0 GiB".
func Bytes(n uint64) string { return humanize.IBytes(n) }

// Summary says in a few words what the warden may use, e.g.
// "2 cores (logical CPUs 0-1) on 1 NUMA node".
func (t Topology) Summary() string {
	return fmt.Sprintf("%d physical cores, %s", len(t.Cores()), t.describe())
}

// EngineOverhead is what one vLLM CPU engine takes besides its KV cache:
// its API server, EngineCore and worker each import torch (about 1 GiB of
// resident memory apiece, measured with vLLM 0.32.0 and a tiny model).
const EngineOverhead = 3 << 30

// minAutoKV is the smallest automatic KV cache per rank.
const minAutoKV = 256 << 20

// KVCache sizes each of dp ranks' KV cache from setting, "auto" or a size
// (ParseSize), given the memory available. auto is half of what the
// engines' own EngineOverhead leaves, split over the ranks, in whole
// 64 MiB; it is an error when that is below 256 MiB. A given size is taken
// as it is; fits says whether the engines should fit in avail.
func KVCache(setting string, dp int, avail uint64) (perRank uint64, fits bool, err error) {
	need := uint64(dp) * EngineOverhead
	if setting == "auto" {
		if avail < need+uint64(dp)*minAutoKV*2 {
			return 0, false, fmt.Errorf("%d CPU engines need about %s each plus their KV cache, but %s is available: "+
				"lower --dp, free memory, or set --cpu-kv-cache", dp, Bytes(EngineOverhead), Bytes(avail))
		}
		return (avail - need) / 2 / uint64(dp) &^ (64<<20 - 1), true, nil
	}
	perRank, err = ParseSize(setting)
	if err != nil {
		return 0, false, err
	}
	return perRank, need+perRank*uint64(dp) <= avail, nil
}
