package gpu

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// linked returns devs with symmetric links set from "a-b:PATH" pairs; every
// other pair gets rest ("" leaves it unknown).
func linked(devs []Device, rest string, pairs ...string) []Device {
	set := map[[2]int]string{}
	for _, p := range pairs {
		var a, b int
		ab, path, _ := strings.Cut(p, ":")
		as, bs, _ := strings.Cut(ab, "-")
		a, b = atoi(as), atoi(bs)
		set[[2]int{a, b}], set[[2]int{b, a}] = path, path
	}
	for i := range devs {
		devs[i].Links = nil
		for j := range devs {
			if i == j {
				continue
			}
			p, ok := set[[2]int{devs[i].Index, devs[j].Index}]
			if !ok {
				p = rest
			}
			if p != "" {
				devs[i].Links = append(devs[i].Links, Link{GPU: devs[j].Index, Path: p})
			}
		}
	}
	return devs
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func withBusy(devs []Device, i int, free uint64) []Device {
	devs[i].MemFree = free
	devs[i].Processes = []Process{{PID: 1234, Name: "python3", UsedBytes: devs[i].MemTotal - free}}
	return devs
}

func withMIG(devs []Device, i int) []Device {
	devs[i].MIG = true
	return devs
}

func withNUMA(devs []Device, nodes ...int) []Device {
	for i := range devs {
		devs[i].NUMANode = node(nodes[i])
	}
	return devs
}

func groupIndices(groups [][]Device) [][]int {
	var out [][]int
	for _, g := range groups {
		out = append(out, indices(g))
	}
	return out
}

func TestChoose(t *testing.T) {
	mixed := fourGPUs()
	mixed[3].Name = "NVIDIA RTX A6000"
	tests := []struct {
		name        string
		devs        []Device
		req         Request
		want        [][]int
		wantSkipped []string // substrings, one per skipped line
		wantWarn    []string // substrings of the warnings, in order
		wantErr     []string // substrings of the error
	}{
		// Which cards: CUDA_VISIBLE_DEVICES and --gpus.
		{name: "CUDA_VISIBLE_DEVICES unset means all", devs: fourGPUs(), req: Request{DP: 4, TP: 1},
			want: [][]int{{0}, {1}, {2}, {3}}},
		{name: "CUDA_VISIBLE_DEVICES set but empty means none", devs: fourGPUs(),
			req:     Request{DP: 1, TP: 1, CUDAVisibleSet: true, CUDAVisible: ""},
			wantErr: []string{"CUDA_VISIBLE_DEVICES is set but empty", "unset CUDA_VISIBLE_DEVICES", "--gpus 0,1"}},
		{name: "CUDA_VISIBLE_DEVICES of blanks is empty too", devs: fourGPUs(),
			req:     Request{DP: 1, TP: 1, CUDAVisibleSet: true, CUDAVisible: " "},
			wantErr: []string{"set but empty"}},
		{name: "CUDA_VISIBLE_DEVICES by index selects in its order", devs: fourGPUs(),
			req: Request{DP: 2, TP: 1, CUDAVisibleSet: true, CUDAVisible: "3,1"}, want: [][]int{{3}, {1}}},
		{name: "CUDA_VISIBLE_DEVICES by UUID selects the same cards", devs: fourGPUs(),
			req: Request{DP: 2, TP: 1, CUDAVisibleSet: true, CUDAVisible: "GPU-bbbb-1,GPU-aaaa-0"}, want: [][]int{{1}, {0}}},
		{name: "--gpus within CUDA_VISIBLE_DEVICES", devs: fourGPUs(),
			req: Request{DP: 1, TP: 1, CUDAVisibleSet: true, CUDAVisible: "1,2", GPUs: "2"}, want: [][]int{{2}}},
		{name: "--gpus outside CUDA_VISIBLE_DEVICES", devs: fourGPUs(),
			req: Request{DP: 1, TP: 1, CUDAVisibleSet: true, CUDAVisible: "1,2", GPUs: "0"}, wantErr: []string{"within CUDA_VISIBLE_DEVICES"}},
		{name: "too few cards", devs: fourGPUs(), req: Request{DP: 3, TP: 2},
			wantErr: []string{"need 6 GPUs (--dp 3 x --tp 2) but 4 are available (GPU 0, 1, 2, 3)", "--engine sim"}},
		{name: "--gpus names too few", devs: fourGPUs(), req: Request{DP: 2, TP: 1, GPUs: "1"},
			wantErr: []string{`need 2 GPUs (--dp 2 x --tp 1) but --gpus "1" names 1`}},
		{name: "mixed cards with indices and no CUDA_DEVICE_ORDER warn", devs: mixed,
			req:      Request{DP: 2, TP: 1, CUDAVisibleSet: true, CUDAVisible: "0,3"},
			want:     [][]int{{0}, {3}},
			wantWarn: []string{"CUDA_VISIBLE_DEVICES=0,3 is read in nvidia-smi's order"}},
		{name: "mixed cards with CUDA_DEVICE_ORDER=PCI_BUS_ID do not", devs: mixed,
			req:  Request{DP: 2, TP: 1, CUDAVisibleSet: true, CUDAVisible: "0,3", CUDADeviceOrder: "PCI_BUS_ID"},
			want: [][]int{{0}, {3}}},

		// MIG.
		{name: "a MIG card is skipped when others suffice", devs: withMIG(fourGPUs(), 2), req: Request{DP: 3, TP: 1},
			want:        [][]int{{0}, {1}, {3}},
			wantSkipped: []string{"skipping GPU 2: MIG mode is enabled, and vLLM cannot use a MIG-enabled card as a whole"}},
		{name: "a MIG card listed in --gpus is refused", devs: withMIG(fourGPUs(), 2), req: Request{DP: 1, TP: 1, GPUs: "2"},
			wantErr: []string{"--gpus 2: GPU 2: MIG mode is enabled", "--gpus 0 (cards with room)", "sudo nvidia-smi -i 2 -mig 0"}},
		{name: "a needed MIG card is refused", devs: withMIG(fourGPUs(), 2), req: Request{DP: 4, TP: 1},
			wantErr: []string{"only GPU 0, 1, 3 have it", "GPU 2: MIG mode is enabled", "--dp 3", "nvidia-smi -i 2 -mig 0"}},

		// Partly busy cards (16 GiB each; 0.92 x 16 GiB = 14.7 GiB needed).
		{name: "a busy card is skipped when others suffice", devs: withBusy(fourGPUs(), 1, 3*gib), req: Request{DP: 3, TP: 1},
			want: [][]int{{0}, {2}, {3}},
			wantSkipped: []string{"skipping GPU 1: 3.0 GiB free of 16.0 GiB, vLLM needs 14.7 GiB (0.92 x 16.0 GiB), " +
				"in use by python3 (pid 1234, 13.0 GiB)"}},
		{name: "a needed busy card: the largest utilization that fits", devs: withBusy(fourGPUs(), 1, 3*gib), req: Request{DP: 4, TP: 1},
			wantErr: []string{"need 4 GPUs (--dp 4 x --tp 1) with room for vLLM (--gpu-memory-utilization 0.92, vLLM 0.32's default",
				"only GPU 0, 2, 3 have it: GPU 1: 3.0 GiB free", "-- --gpu-memory-utilization 0.15 (the most GPU 1 (3.0 GiB free of 16.0 GiB)",
				"--dp 3", "stop what holds GPU 1"}},
		{name: "busy with spare cards: --gpus and the utilization", devs: withBusy(withBusy(append(fourGPUs(), Device{Index: 4, UUID: "GPU-e", MemTotal: 16 * gib, MemFree: 2 * gib}), 1, 3*gib), 3, 8*gib),
			req:     Request{DP: 4, TP: 1},
			wantErr: []string{"only GPU 0, 2 have it", "--gpus 0,1,2,3 -- --gpu-memory-utilization 0.15"}},
		{name: "--gpus with a busy card names a list that works", devs: withBusy(fourGPUs(), 1, 3*gib), req: Request{DP: 2, TP: 1, GPUs: "0,1"},
			wantErr: []string{"--gpus 0,1: GPU 1: 3.0 GiB free of 16.0 GiB, vLLM needs 14.7 GiB", "--gpus 0,2 (cards with room)",
				"-- --gpu-memory-utilization 0.15"}},
		{name: "--gpus with a busy card and nothing to swap in", devs: withBusy(fourGPUs()[:2], 1, 3*gib), req: Request{DP: 2, TP: 1, GPUs: "0,1"},
			wantErr: []string{"-- --gpu-memory-utilization 0.15"}},
		{name: "a full card gets no utilization to try", devs: withBusy(fourGPUs(), 1, gib/2), req: Request{DP: 4, TP: 1},
			wantErr: []string{"only GPU 0, 2, 3 have it", "--dp 3"}},
		{name: "a lower utilization after -- fits the busy card", devs: withBusy(fourGPUs(), 1, 3*gib),
			req: Request{DP: 4, TP: 1, Extra: []string{"--gpu-memory-utilization", "0.15"}}, want: [][]int{{0}, {1}, {2}, {3}}},
		{name: "the = form after -- counts, and the last one wins", devs: withBusy(fourGPUs(), 1, 3*gib),
			req:     Request{DP: 4, TP: 1, Extra: []string{"--gpu-memory-utilization=0.1", "--gpu-memory-utilization=0.5"}},
			wantErr: []string{"--gpu-memory-utilization 0.50, given after --", "vLLM needs 8.0 GiB (0.50 x 16.0 GiB)"}},
		{name: "the device alias counts", devs: withBusy(fourGPUs(), 1, 3*gib),
			req: Request{DP: 4, TP: 1, Extra: []string{"--device-memory-utilization", "0.1"}}, want: [][]int{{0}, {1}, {2}, {3}}},
		{name: "a utilization out of range is refused", devs: fourGPUs(),
			req: Request{DP: 1, TP: 1, Extra: []string{"--gpu-memory-utilization", "1.5"}}, wantErr: []string{`--gpu-memory-utilization "1.5" after --`}},
		{name: "vLLM 0.32's default 0.92 refuses 14.5 GiB free", devs: withBusy(fourGPUs(), 0, 14*gib+gib/2),
			req: Request{DP: 4, TP: 1, VLLMVersion: "0.32.0"}, wantErr: []string{"0.92, vLLM 0.32.0's default", "vLLM needs 14.7 GiB"}},
		{name: "vLLM 0.19's default 0.9 takes 14.5 GiB free", devs: withBusy(fourGPUs(), 0, 14*gib+gib/2),
			req: Request{DP: 4, TP: 1, VLLMVersion: "0.19.0"}, want: [][]int{{0}, {1}, {2}, {3}}},
		{name: "memory invisible to this container", devs: func() []Device { d := fourGPUs(); d[3].MemFree = 2 * gib; return d }(),
			req: Request{DP: 4, TP: 1}, wantErr: []string{"GPU 3: 2.0 GiB free of 16.0 GiB", "in use by processes not visible here"}},
		{name: "unknown memory counts as room", devs: func() []Device { d := fourGPUs(); d[2].MemTotal, d[2].MemFree = 0, 0; return d }(),
			req: Request{DP: 4, TP: 1}, want: [][]int{{0}, {1}, {2}, {3}}},

		// Tensor parallelism by topology.
		{name: "no topology: contiguous groups", devs: fourGPUs(), req: Request{DP: 2, TP: 2}, want: [][]int{{0, 1}, {2, 3}}},
		{name: "NVLink pairs group together", devs: linked(fourGPUs(), "PHB", "0-2:NV4", "1-3:NV4"), req: Request{DP: 2, TP: 2},
			want: [][]int{{0, 2}, {1, 3}}},
		{name: "one PCIe switch before the host bridge", devs: linked(fourGPUs(), "PHB", "1-2:PIX"), req: Request{DP: 1, TP: 2},
			want: [][]int{{1, 2}}},
		{name: "more NVLinks rank better", devs: linked(fourGPUs(), "PHB", "0-1:NV1", "2-3:NV2"), req: Request{DP: 1, TP: 2},
			want: [][]int{{2, 3}}},
		{name: "groups stay on their socket", devs: withNUMA(linked(fourGPUs(), "SYS", "0-1:PIX", "2-3:PIX"), 0, 0, 1, 1),
			req: Request{DP: 2, TP: 2}, want: [][]int{{0, 1}, {2, 3}}},
		{name: "a group across sockets is warned about", devs: withNUMA(linked(fourGPUs(), "SYS", "0-1:PIX", "2-3:PIX"), 0, 0, 1, 1),
			req: Request{DP: 1, TP: 2, GPUs: "1,2"}, want: [][]int{{1, 2}},
			wantWarn: []string{"rank 0's GPUs 1,2 span CPU sockets (GPU 1 and GPU 2 are linked through SYS"}},
		{name: "different NUMA nodes without links warn too", devs: withNUMA(fourGPUs(), 0, 1, 0, 1),
			req: Request{DP: 1, TP: 2, GPUs: "0,1"}, want: [][]int{{0, 1}},
			wantWarn: []string{"GPU 0 is on NUMA node 0, GPU 1 on node 1"}},
		{name: "different CPU affinity without NUMA warns", devs: func() []Device {
			d := fourGPUs()
			d[0].CPUAffinity, d[1].CPUAffinity = "0-15", "16-31"
			return d
		}(), req: Request{DP: 1, TP: 2}, want: [][]int{{0, 1}}, wantWarn: []string{"GPU 0's nearest CPUs are 0-15, GPU 1's 16-31"}},
		{name: "a small /dev/shm with --tp 2", devs: fourGPUs(), req: Request{DP: 2, TP: 2, ShmFree: 64 << 20, ShmChecked: true},
			want: [][]int{{0, 1}, {2, 3}},
			wantWarn: []string{"/dev/shm has 64 MiB free, but --tp 2 engines map up to 1.3 GiB there (vLLM's queues between an engine's " +
				"processes, 664 MiB a replica x --dp 2)", "--shm-size=16g or --ipc=host"}},
		{name: "a large /dev/shm is fine", devs: fourGPUs(), req: Request{DP: 2, TP: 2, ShmFree: 16 << 30, ShmChecked: true},
			want: [][]int{{0, 1}, {2, 3}}},
		{name: "--tp 1 needs no /dev/shm", devs: fourGPUs(), req: Request{DP: 4, TP: 1, ShmFree: 64 << 20, ShmChecked: true},
			want: [][]int{{0}, {1}, {2}, {3}}},
		{name: "an unreadable /dev/shm is not reported", devs: fourGPUs(), req: Request{DP: 2, TP: 2},
			want: [][]int{{0, 1}, {2, 3}}},
		{name: "zero dp", devs: fourGPUs(), req: Request{DP: 0, TP: 1}, wantErr: []string{"at least 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Choose(tt.devs, tt.req)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Choose() = %v, want an error", groupIndices(plan.Groups))
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%s", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Choose() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, groupIndices(plan.Groups)); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			if len(plan.Skipped) != len(tt.wantSkipped) {
				t.Errorf("skipped = %q, want %d lines", plan.Skipped, len(tt.wantSkipped))
			}
			for i, w := range tt.wantSkipped {
				if i < len(plan.Skipped) && !strings.Contains(plan.Skipped[i], w) {
					t.Errorf("skipped[%d] = %q, want it to contain %q", i, plan.Skipped[i], w)
				}
			}
			all := strings.Join(plan.Warnings, "\n")
			for _, w := range tt.wantWarn {
				if !strings.Contains(all, w) {
					t.Errorf("warnings lack %q:\n%s", w, all)
				}
			}
			if len(tt.wantWarn) == 0 && len(plan.Warnings) > 0 {
				t.Errorf("unexpected warnings: %q", plan.Warnings)
			}
		})
	}
}

func TestMemoryUtilization(t *testing.T) {
	tests := []struct {
		extra   []string
		version string
		want    float64
		wantErr bool
	}{
		{version: "0.32.0+cpu", want: 0.92},
		{version: "0.33.1", want: 0.92},
		{version: "1.0.0", want: 0.92},
		{version: "0.22.1", want: 0.92},
		{version: "0.19.0", want: 0.90},
		{version: "0.9.2", want: 0.90},
		{version: "", want: 0.92},
		{version: "garbage", want: 0.92},
		{extra: []string{"--gpu-memory-utilization", "0.8"}, want: 0.8},
		{extra: []string{"--gpu-memory-utilization=0.8"}, want: 0.8},
		{extra: []string{"--gpu_memory_utilization=0.7"}, want: 0.7},
		{extra: []string{"--max-model-len", "4096", "--gpu-memory-utilization", "0.6", "--enforce-eager"}, want: 0.6},
		{extra: []string{"--gpu-memory-utilization"}, wantErr: true},
		{extra: []string{"--gpu-memory-utilization", "0"}, wantErr: true},
		{extra: []string{"--gpu-memory-utilization", "abc"}, wantErr: true},
	}
	for _, tt := range tests {
		got, _, err := MemoryUtilization(tt.extra, tt.version)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("MemoryUtilization(%q, %q) = %v, %v; want %v (error %v)", tt.extra, tt.version, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestShmNeed(t *testing.T) {
	tests := []struct {
		dp, tp int
		want   uint64
	}{
		{1, 1, 0},
		{4, 1, 0},
		{1, 2, 664 << 20},
		{2, 2, 2 * 664 << 20},
		{1, 4, 1144 << 20},
	}
	for _, tt := range tests {
		if got := ShmNeed(tt.dp, tt.tp); got != tt.want {
			t.Errorf("ShmNeed(%d, %d) = %d MiB, want %d MiB", tt.dp, tt.tp, got>>20, tt.want>>20)
		}
	}
}

func TestPlanLogNamesUUIDsPerRank(t *testing.T) {
	devs := linked(fourGPUs(), "", "0-1:NV4", "2-3:NV4")
	devs[2].PCIBusID = "00000000:41:00.0"
	plan, err := Choose(withBusy(devs, 3, 15*gib), Request{DP: 2, TP: 2, GPUs: "0,1,2,3", Extra: []string{"--gpu-memory-utilization=0.5"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	plan.Log(slog.New(slog.NewTextHandler(&buf, nil)))
	for _, w := range []string{
		`msg="rank GPUs" rank=0 CUDA_VISIBLE_DEVICES=0,1 uuids=GPU-aaaa-0,GPU-bbbb-1 pci=?,? name="NVIDIA RTX A4000" gpu_memory_utilization=0.5 link=NV4`,
		`msg="rank GPUs" rank=1 CUDA_VISIBLE_DEVICES=2,3 uuids=GPU-cccc-2,GPU-cccd-3 pci=00000000:41:00.0,?`,
		`level=WARN msg="GPU 3 is in use by python3 (pid 1234, 1.0 GiB)"`,
	} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, buf.String())
		}
	}
}

func TestNormBus(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:01:00.0": "0000:01:00.0",
		"0000:1A:00.0":     "0000:1a:00.0",
		"00000001:41:00.0": "0001:41:00.0",
		"":                 "",
		"junk":             "junk",
	} {
		if got := normBus(in); got != want {
			t.Errorf("normBus(%q) = %q, want %q", in, got, want)
		}
	}
	root := fakeSysfs(t, map[string]string{"0000:01:00.0": "1", "0000:02:00.0": "-1"})
	if n := sysfsNUMANode(root, "00000000:01:00.0"); n == nil || *n != 1 {
		t.Errorf("sysfsNUMANode(01) = %v, want 1", n)
	}
	if n := sysfsNUMANode(root, "00000000:02:00.0"); n != nil {
		t.Errorf("sysfsNUMANode(02) = %d, want unknown (-1)", *n)
	}
	if n := sysfsNUMANode(root, "00000000:03:00.0"); n != nil {
		t.Errorf("sysfsNUMANode(missing) = %d, want unknown", *n)
	}
}

func TestWriteTableShowsLinksAndMIG(t *testing.T) {
	devs := withMIG(withNUMA(linked(fourGPUs()[:2], "", "0-1:NV4"), 0, 1), 1)
	devs[0].PCIBusID = "00000000:01:00.0"
	var buf bytes.Buffer
	WriteTable(&buf, devs)
	for _, w := range []string{"MIG enabled", "00000000:01:00.0 (node 0)", "- (node 1)", "NV4", "NV#: NVLinks"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, buf.String())
		}
	}
	buf.Reset()
	WriteTable(&buf, fourGPUs())
	if strings.Contains(buf.String(), "links") {
		t.Errorf("a table without topology printed a link matrix:\n%s", buf.String())
	}
}
