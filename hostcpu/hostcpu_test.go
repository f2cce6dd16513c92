package hostcpu

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

// fakeSys builds a sysfs with sockets x coresPer x smt logical CPUs, one
// NUMA node per socket. Logical CPU ids follow Linux's usual enumeration:
// first thread of every core, then the second threads.
func fakeSys(sockets, coresPer, smt int) fstest.MapFS {
	fsys := fstest.MapFS{}
	n := sockets * coresPer * smt
	fsys["devices/system/cpu/online"] = &fstest.MapFile{Data: fmt.Appendf(nil, "0-%d\n", n-1)}
	nodeCPUs := make([][]int, sockets)
	for id := 0; id < n; id++ {
		phys := id % (sockets * coresPer)
		sock := phys / coresPer
		base := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", id)
		fsys[base+"core_id"] = &fstest.MapFile{Data: fmt.Appendf(nil, "%d\n", phys%coresPer)}
		fsys[base+"physical_package_id"] = &fstest.MapFile{Data: fmt.Appendf(nil, "%d\n", sock)}
		nodeCPUs[sock] = append(nodeCPUs[sock], id)
	}
	for s, cpus := range nodeCPUs {
		d := fmt.Sprintf("devices/system/node/node%d/", s)
		fsys[d+"cpulist"] = &fstest.MapFile{Data: []byte(FormatList(cpus) + "\n")}
		fsys[d+"meminfo"] = &fstest.MapFile{Data: fmt.Appendf(nil,
			"Node %d MemTotal:       65536000 kB\nNode %d MemFree:        32768000 kB\n", s, s)}
	}
	return fsys
}

func TestParseAndFormatList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		out  string
	}{
		{"0", []int{0}, "0"},
		{"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"0-1,4,6-7", []int{0, 1, 4, 6, 7}, "0-1,4,6-7"},
		{"", []int{}, ""},
	} {
		got, err := ParseList(tc.in)
		if err != nil {
			t.Fatalf("ParseList(%q): %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseList(%q) (-want +got):\n%s", tc.in, diff)
		}
		if s := FormatList(got); s != tc.out {
			t.Errorf("FormatList(%v) = %q, want %q", got, s, tc.out)
		}
	}
	for _, bad := range []string{"x", "3-1", "1-", "1,,2"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) accepted a bad list", bad)
		}
	}
}

func TestDiscoverReadsTopologyAndMask(t *testing.T) {
	topo, err := discover(fakeSys(2, 4, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.CPUs) != 16 || len(topo.Nodes) != 2 || topo.Restricted {
		t.Fatalf("got %d CPUs on %d nodes (restricted %v), want 16 on 2", len(topo.CPUs), len(topo.Nodes), topo.Restricted)
	}
	if got := topo.Nodes[1].CPUs; FormatList(got) != "4-7,12-15" {
		t.Errorf("node 1 CPUs %s, want 4-7,12-15", FormatList(got))
	}
	if topo.Nodes[0].MemTotal != 65536000<<10 || topo.Nodes[0].MemFree != 32768000<<10 {
		t.Errorf("node 0 memory %d/%d", topo.Nodes[0].MemFree, topo.Nodes[0].MemTotal)
	}
	cores := topo.Cores()
	if len(cores) != 8 {
		t.Fatalf("%d physical cores, want 8", len(cores))
	}
	if got := []int{cores[0][0].ID, cores[0][1].ID}; !cmp.Equal(got, []int{0, 8}) {
		t.Errorf("core 0 is CPUs %v, want its SMT siblings [0 8]", got)
	}

	masked, err := discover(fakeSys(2, 4, 2), []int{4, 5, 12, 13})
	if err != nil {
		t.Fatal(err)
	}
	if !masked.Restricted || len(masked.Nodes) != 1 || masked.Nodes[0].ID != 1 || len(masked.Cores()) != 2 {
		t.Errorf("masked to node 1's first two cores: restricted %v, nodes %+v, %d cores",
			masked.Restricted, masked.Nodes, len(masked.Cores()))
	}
	if _, err := discover(fakeSys(1, 2, 1), []int{9}); err == nil {
		t.Error("a mask outside the online CPUs was accepted")
	}
}

func TestDiscoverWithoutNUMAInformation(t *testing.T) {
	fsys := fstest.MapFS{"devices/system/cpu/online": &fstest.MapFile{Data: []byte("0-1\n")}}
	topo, err := discover(fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Nodes) != 1 || FormatList(topo.Nodes[0].CPUs) != "0-1" || len(topo.Cores()) != 2 {
		t.Errorf("without node or topology files: nodes %+v, %d cores; want one node with 2 cores", topo.Nodes, len(topo.Cores()))
	}
}

func TestSplit(t *testing.T) {
	type want struct{ cpus, bind, nodes string }
	for _, tc := range []struct {
		name                string
		sockets, cores, smt int
		dp                  int
		want                []want
	}{
		{"two cores, two ranks (this CI machine)", 1, 2, 1, 2, []want{{"0", "0", "0"}, {"1", "1", "0"}}},
		{"two cores, one rank", 1, 2, 1, 1, []want{{"0-1", "0-1", "0"}}},
		{"eight cores one rank reserves a core", 1, 8, 1, 1, []want{{"0-7", "0-6", "0"}}},
		{"uneven: the lower ranks get the extra core", 1, 5, 1, 2, []want{{"0-2", "0-2", "0"}, {"3-4", "3-4", "0"}}},
		{"SMT siblings stay together, bind one per core", 1, 4, 2, 2, []want{{"0-1,4-5", "0-1", "0"}, {"2-3,6-7", "2-3", "0"}}},
		{"two sockets, two ranks: one per node", 2, 4, 2, 2, []want{{"0-3,8-11", "0-2", "0"}, {"4-7,12-15", "4-6", "1"}}},
		{"two sockets, four ranks: two per node", 2, 4, 1, 4, []want{{"0-1", "0-1", "0"}, {"2-3", "2-3", "0"}, {"4-5", "4-5", "1"}, {"6-7", "6-7", "1"}}},
		{"four sockets, two ranks: two nodes each", 4, 2, 1, 2, []want{{"0-3", "0-2", "0,1"}, {"4-7", "4-6", "2,3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := discover(fakeSys(tc.sockets, tc.cores, tc.smt), nil)
			if err != nil {
				t.Fatal(err)
			}
			sets, err := Split(topo, tc.dp)
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for i, s := range sets {
				if s.Rank != i {
					t.Errorf("set %d has rank %d", i, s.Rank)
				}
				nodes := make([]string, len(s.Nodes))
				for j, n := range s.Nodes {
					nodes[j] = fmt.Sprint(n)
				}
				got = append(got, want{FormatList(s.CPUs), FormatList(s.Bind), strings.Join(nodes, ",")})
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Split(dp %d) (-want +got):\n%s", tc.dp, diff)
			}
		})
	}
}

func TestSplitRefusesTooFewCores(t *testing.T) {
	topo, err := discover(fakeSys(1, 2, 2), nil) // 2 physical cores, 4 logical CPUs
	if err != nil {
		t.Fatal(err)
	}
	_, err = Split(topo, 3)
	if err == nil || !strings.Contains(err.Error(), "--dp 3 needs at least 3 physical CPU cores") ||
		!strings.Contains(err.Error(), "may use 2") {
		t.Errorf("dp 3 on 2 cores: %v", err)
	}
	uneven, _ := discover(fakeSys(2, 1, 1), nil)
	if _, err := Split(uneven, 3); err == nil || !strings.Contains(err.Error(), "NUMA node") {
		t.Errorf("dp 3 on two one-core nodes: %v", err)
	}
}

func TestSetEnvAndLabel(t *testing.T) {
	s := Set{CPUs: []int{4, 5, 6, 7}, Bind: []int{4, 5, 6}, Nodes: []int{1}}
	if diff := cmp.Diff([]string{"VLLM_CPU_OMP_THREADS_BIND=4-6", "CPU_VISIBLE_MEMORY_NODES=1"}, s.Env()); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
	if l := s.Label(); l != "CPU 4-7 node 1" {
		t.Errorf("Label %q", l)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"4GiB": 4 << 30, "512 MiB": 512 << 20, "1073741824": 1 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseSize("lots"); err == nil {
		t.Error("ParseSize accepted \"lots\"")
	}
}

func TestKVCache(t *testing.T) {
	const gib = 1 << 30
	kv, fits, err := KVCache("auto", 2, 22*gib)
	if err != nil || !fits || kv != 4*gib { // (22 - 2x3) / 2 / 2
		t.Errorf("auto, dp 2, 22 GiB: %s %v %v; want 4 GiB", Bytes(kv), fits, err)
	}
	if _, _, err := KVCache("auto", 4, 12*gib); err == nil || !strings.Contains(err.Error(), "lower --dp") {
		t.Errorf("auto, dp 4, 12 GiB: %v; want a refusal", err)
	}
	if kv, fits, err := KVCache("8GiB", 2, 12*gib); err != nil || fits || kv != 8*gib {
		t.Errorf("8GiB x 2 in 12 GiB: %s %v %v; want taken as given, not fitting", Bytes(kv), fits, err)
	}
	if _, _, err := KVCache("much", 1, 12*gib); err == nil {
		t.Error("a size that is not one was accepted")
	}
}
