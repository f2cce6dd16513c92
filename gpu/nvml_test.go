//go:build linux && cgo

package gpu

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"
)

func TestDiscoverWithDGXA100Mock(t *testing.T) {
	server := dgxa100.New()
	server.Devices[0].(*dgxa100.Device).MemoryInfo = nvml.Memory{Total: 40 * gib, Free: 40 * gib}
	busy := server.Devices[1].(*dgxa100.Device)
	busy.MemoryInfo = nvml.Memory{Total: 40 * gib, Free: 25 * gib, Used: 15 * gib}
	me := os.Getpid()
	busy.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: uint32(me), UsedGpuMemory: 15 * gib}}, nvml.SUCCESS
	}
	busy.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: uint32(me), UsedGpuMemory: 15 * gib}}, nvml.SUCCESS // same pid: listed once
	}
	devs, err := discoverWith(server)
	if err != nil {
		t.Fatalf("discoverWith() error = %v", err)
	}
	if len(devs) != 8 {
		t.Fatalf("got %d GPUs, want the mock's 8", len(devs))
	}
	for i, d := range devs {
		if d.Index != i || d.Name != "Mock NVIDIA A100-SXM4-40GB" || !strings.HasPrefix(d.UUID, "GPU-") || d.MemTotal != 40*gib {
			t.Errorf("GPU %d = %+v", i, d)
		}
	}
	name, _ := os.Executable()
	want := []Process{{PID: me, Name: baseName(name), UsedBytes: 15 * gib}}
	if diff := cmp.Diff(want, devs[1].Processes); diff != "" {
		t.Errorf("GPU 1 processes (-want +got):\n%s", diff)
	}
	if devs[1].MemFree != 25*gib {
		t.Errorf("GPU 1 free = %d, want 25 GiB", devs[1].MemFree)
	}
	warn := BusyWarnings([][]Device{devs[:2]})
	if len(warn) != 1 || !strings.HasPrefix(warn[0], "GPU 1 is in use by "+baseName(name)) {
		t.Errorf("BusyWarnings() = %q", warn)
	}
}

func baseName(p string) string {
	name := p[strings.LastIndex(p, "/")+1:]
	if len(name) > 15 { // /proc/PID/comm is cut to 15 bytes
		name = name[:15]
	}
	return name
}

// TestDiscoverStopsAtFailedInit proves nothing is called past a failed Init:
// every other method of this mock is nil and would panic if called.
func TestDiscoverStopsAtFailedInit(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := discoverWith(lib)
	if err == nil || !strings.Contains(err.Error(), "ERROR_LIBRARY_NOT_FOUND") {
		t.Fatalf("discoverWith() error = %v, want the init failure", err)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
}

// a100s is the DGX A100 mock with every card idle (40 GiB free), PCI bus
// ids set (the mock leaves them empty), card busy holding 35 GiB and card
// mig in MIG mode (-1: none).
func a100s(t *testing.T, busy, mig int) *dgxa100.Server {
	t.Helper()
	server := dgxa100.New()
	for i, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo = nvml.Memory{Total: 40 * gib, Free: 40 * gib}
		bus := fmt.Sprintf("00000000:%02X:00.0", 0x10*(i+1))
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(bus), nvml.SUCCESS }
		if i == busy {
			dev.MemoryInfo = nvml.Memory{Total: 40 * gib, Free: 5 * gib, Used: 35 * gib}
		}
		if i == mig {
			dev.MigMode = nvml.DEVICE_MIG_ENABLE
		}
	}
	return server
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for i := 0; i < len(bus) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(bus[i])
	}
	return p
}

func index(d nvml.Device) int { return d.(*dgxa100.Device).Index }

// pcieTopology makes the mock a PCIe box: no NVLink, pairs (0,1), (2,3)...
// under one switch, halves 0-3 and 4-7 on NUMA nodes 0 and 1.
func pcieTopology(server *dgxa100.Server) {
	for _, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		me := dev.Index
		dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		dev.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			o := index(other)
			switch {
			case me/2 == o/2:
				return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
			case me/4 == o/4:
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return me / 4, nvml.SUCCESS }
		dev.GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) {
			return []uint{0xffff << (16 * uint(me/4))}, nvml.SUCCESS
		}
	}
}

// TestChooseOnDGXA100Mock runs the GPU rules on what discoverWith reads from
// go-nvml's DGX A100 mock: a busy card and a MIG card are skipped, the TP
// pairs follow the PCIe switches, NUMA nodes and CPU affinity are read.
func TestChooseOnDGXA100Mock(t *testing.T) {
	server := a100s(t, 3, 5)
	pcieTopology(server)
	devs, err := discoverWith(server)
	if err != nil {
		t.Fatal(err)
	}
	if devs[5].MIG != true || devs[4].MIG {
		t.Errorf("MIG read as %v/%v for GPU 5/4, want true/false", devs[5].MIG, devs[4].MIG)
	}
	if devs[6].NUMANode == nil || *devs[6].NUMANode != 1 || devs[6].CPUAffinity != "16-31" || devs[1].CPUAffinity != "0-15" {
		t.Errorf("GPU 6 NUMA %v affinity %q, GPU 1 affinity %q", devs[6].NUMANode, devs[6].CPUAffinity, devs[1].CPUAffinity)
	}
	if devs[2].PCIBusID != "00000000:30:00.0" {
		t.Errorf("GPU 2 bus id %q", devs[2].PCIBusID)
	}
	if p := path(devs[0], devs[1]); p != "PIX" {
		t.Errorf("GPU 0-1 path %q, want PIX", p)
	}
	if p := path(devs[0], devs[7]); p != "SYS" {
		t.Errorf("GPU 0-7 path %q, want SYS", p)
	}
	plan, err := Choose(devs, Request{DP: 2, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]int{{0, 1}, {6, 7}}, groupIndices(plan.Groups)); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	want := []string{
		"skipping GPU 3: 5.0 GiB free of 40.0 GiB, vLLM needs 36.8 GiB (0.92 x 40.0 GiB), in use by processes not visible here",
		"skipping GPU 5: MIG mode is enabled",
	}
	for i, w := range want {
		if i >= len(plan.Skipped) || !strings.HasPrefix(plan.Skipped[i], w) {
			t.Errorf("skipped = %q, want line %d to start %q", plan.Skipped, i, w)
		}
	}
	if len(plan.Warnings) > 0 {
		t.Errorf("warnings: %q", plan.Warnings)
	}
	// --gpus across the sockets: refused for the busy card, warned for SYS.
	if _, err := Choose(devs, Request{DP: 1, TP: 2, GPUs: "2,3"}); err == nil ||
		!strings.Contains(err.Error(), "--gpus 2,3: GPU 3: 5.0 GiB free") || !strings.Contains(err.Error(), "--gpus 2,0 (cards with room)") {
		t.Errorf("--gpus 2,3: %v", err)
	}
	plan, err = Choose(devs, Request{DP: 1, TP: 2, GPUs: "1,6"})
	if err != nil || len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "GPU 1 and GPU 6 are linked through SYS") {
		t.Errorf("--gpus 1,6: %v, warnings %q", err, plan.Warnings)
	}
}

// TestNVLinkOnDGXA100Mock reads NVLinks both ways NVML reports them: to an
// NVSwitch (DGX A100: 12 links each, every pair NV12) and directly to
// another card's PCI bus id.
func TestNVLinkOnDGXA100Mock(t *testing.T) {
	server := a100s(t, -1, -1)
	for _, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l >= 12 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
	}
	devs, err := discoverWith(server)
	if err != nil {
		t.Fatal(err)
	}
	if p := path(devs[0], devs[7]); p != "NV12" {
		t.Errorf("NVSwitch path 0-7 = %q, want NV12", p)
	}

	// Direct links: cards 0-3 and 1-2 share 4 links each, the rest PCIe.
	server = a100s(t, -1, -1)
	peers := map[int]int{0: 3, 3: 0, 1: 2, 2: 1}
	for _, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		me := dev.Index
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if _, ok := peers[me]; !ok {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			if l >= 4 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
			return pciInfo(fmt.Sprintf("00000000:%02X:00.0", 0x10*(peers[me]+1))), nvml.SUCCESS
		}
		dev.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
		}
	}
	if devs, err = discoverWith(server); err != nil {
		t.Fatal(err)
	}
	if p, q := path(devs[0], devs[3]), path(devs[0], devs[1]); p != "NV4" || q != "PHB" {
		t.Errorf("paths 0-3 %q (want NV4), 0-1 %q (want PHB)", p, q)
	}
	plan, err := Choose(devs[:4], Request{DP: 2, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]int{{0, 3}, {1, 2}}, groupIndices(plan.Groups)); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
}

// TestHasWithoutExtensions: a library that cannot say which symbols it has
// gets none of the newer calls.
func TestHasWithoutExtensions(t *testing.T) {
	if has(&mock.Interface{}, "nvmlDeviceGetMigMode") {
		t.Error("has() = true for a mock without Extensions")
	}
	if !has(dgxa100.New(), "nvmlDeviceGetMigMode") {
		t.Error("has() = false for the DGX mock, which finds every symbol")
	}
}

func TestCPUList(t *testing.T) {
	for _, tt := range []struct {
		words []uint
		want  string
	}{
		{[]uint{0}, ""},
		{[]uint{0xffff}, "0-15"},
		{[]uint{0x5}, "0,2"},
		{[]uint{1 << 63, 0x3}, "63-65"},
		{[]uint{0xff, 0xff00}, "0-7,72-79"},
	} {
		if got := cpuList(tt.words); got != tt.want {
			t.Errorf("cpuList(%x) = %q, want %q", tt.words, got, tt.want)
		}
	}
}
