//go:build linux && cgo

package gpu

import (
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
