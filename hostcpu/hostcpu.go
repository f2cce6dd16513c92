// Package hostcpu finds the CPUs and memory a CPU engine can use and cuts
// them into one core set per data-parallel rank, the way package gpu finds
// GPUs and assigns GPU groups. It reads Linux's sysfs (online CPUs, each
// CPU's physical core and package, NUMA nodes and their memory), honours
// the warden's own affinity mask (taskset, cgroup cpusets) and reads the
// memory left for KV caches from /proc/meminfo (gopsutil) and the cgroup
// limit. It owns no processes; launch applies a Set to an engine.
package hostcpu

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// CPU is one logical CPU.
type CPU struct {
	ID      int `json:"id"`
	Core    int `json:"core"`    // physical core id (SMT siblings share it within a package)
	Package int `json:"package"` // socket
	Node    int `json:"node"`    // NUMA node
}

// Node is one NUMA node with the logical CPUs of it that the warden may use.
type Node struct {
	ID       int    `json:"id"`
	CPUs     []int  `json:"cpus"`
	MemTotal uint64 `json:"mem_total_bytes"` // 0 when sysfs does not say
	MemFree  uint64 `json:"mem_free_bytes"`
}

// Topology is what the warden may use of this host's CPUs.
type Topology struct {
	CPUs  []CPU  `json:"cpus"` // usable logical CPUs, by id
	Nodes []Node `json:"nodes"`
	// Restricted is true when the affinity mask hides some online CPUs.
	Restricted bool `json:"restricted"`
	Online     int  `json:"online"` // online logical CPUs of the host
}

// Cores returns the usable physical cores, each as its logical CPUs (SMT
// siblings, ascending), ordered by node, package and core id.
func (t Topology) Cores() [][]CPU {
	type key struct{ node, pkg, core int }
	byKey := map[key][]CPU{}
	var keys []key
	for _, c := range t.CPUs {
		k := key{c.Node, c.Package, c.Core}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], c)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.node != b.node {
			return a.node < b.node
		}
		if a.pkg != b.pkg {
			return a.pkg < b.pkg
		}
		return byKey[a][0].ID < byKey[b][0].ID
	})
	out := make([][]CPU, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

// Discover reads this host's topology from /sys, restricted to the
// calling process's affinity mask.
func Discover() (Topology, error) {
	allowed, err := affinity()
	if err != nil {
		return Topology{}, fmt.Errorf("reading the CPU affinity mask: %w", err)
	}
	return discover(os.DirFS("/sys"), allowed)
}

// discover reads the topology from sysfs (rooted at /sys) and keeps the
// CPUs in allowed (nil: all online).
func discover(sys fs.FS, allowed []int) (Topology, error) {
	online, err := readList(sys, "devices/system/cpu/online")
	if err != nil {
		return Topology{}, fmt.Errorf("reading the online CPUs: %w", err)
	}
	t := Topology{Online: len(online)}
	nodeOf := map[int]int{}
	nodeDirs, _ := fs.Glob(sys, "devices/system/node/node[0-9]*")
	for _, d := range nodeDirs {
		id, err := strconv.Atoi(strings.TrimPrefix(path.Base(d), "node"))
		if err != nil {
			continue
		}
		cpus, err := readList(sys, d+"/cpulist")
		if err != nil {
			continue
		}
		n := Node{ID: id}
		n.MemTotal, n.MemFree = nodeMeminfo(sys, d+"/meminfo")
		for _, c := range cpus {
			nodeOf[c] = id
		}
		t.Nodes = append(t.Nodes, n)
	}
	for _, id := range online {
		if allowed != nil && !slices.Contains(allowed, id) {
			t.Restricted = true
			continue
		}
		base := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", id)
		c := CPU{ID: id, Core: readInt(sys, base+"core_id", id), Package: readInt(sys, base+"physical_package_id", 0)}
		c.Node = nodeOf[id] // 0 on hosts without NUMA information
		t.CPUs = append(t.CPUs, c)
	}
	if len(t.CPUs) == 0 {
		return t, errors.New("no usable CPU: the affinity mask and the online CPUs do not overlap")
	}
	if len(t.Nodes) == 0 {
		t.Nodes = []Node{{ID: 0}}
	}
	// Keep only nodes with usable CPUs, each with its usable CPUs.
	var nodes []Node
	for _, n := range t.Nodes {
		n.CPUs = nil
		for _, c := range t.CPUs {
			if c.Node == n.ID {
				n.CPUs = append(n.CPUs, c.ID)
			}
		}
		if len(n.CPUs) > 0 {
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	t.Nodes = nodes
	return t, nil
}

func readInt(sys fs.FS, name string, def int) int {
	b, err := fs.ReadFile(sys, name)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return n
}

func readList(sys fs.FS, name string) ([]int, error) {
	b, err := fs.ReadFile(sys, name)
	if err != nil {
		return nil, err
	}
	return ParseList(strings.TrimSpace(string(b)))
}

// nodeMeminfo reads "Node 0 MemTotal: N kB" and "Node 0 MemFree: N kB".
func nodeMeminfo(sys fs.FS, name string) (total, free uint64) {
	f, err := sys.Open(name)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		v, err := strconv.ParseUint(fields[3], 10, 64)
		if err != nil {
			continue
		}
		switch fields[2] {
		case "MemTotal:":
			total = v << 10
		case "MemFree:":
			free = v << 10
		}
	}
	return total, free
}

// ParseList parses a Linux CPU list such as "0-3,8,10-11".
func ParseList(s string) ([]int, error) {
	out := []int{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// FormatList writes ids (any order) as a Linux CPU list, e.g. "0-3,8".
func FormatList(ids []int) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}
