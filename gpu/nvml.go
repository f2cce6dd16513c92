//go:build linux && cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/shirou/gopsutil/v4/process"
)

// discoverNVML lists GPUs through the system's NVML library.
func discoverNVML() ([]Device, error) {
	return discoverWith(nvml.New())
}

// discoverWith lists GPUs through lib (the real library or go-nvml's mock).
// It calls nothing on lib after a failed Init: with no driver that would kill
// the process, and recover() cannot catch it.
func discoverWith(lib nvml.Interface) (devs []Device, err error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("init: %v", ret) // never call lib again: it may not be loaded
	}
	defer func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS && err == nil {
			err = fmt.Errorf("shutdown: %s", ret.Error())
		}
	}()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("device count: %s", ret.Error())
	}
	for i := 0; i < n; i++ {
		d, err := readDevice(lib, i)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func readDevice(lib nvml.Interface, i int) (Device, error) {
	h, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("GPU %d: handle: %s", i, ret.Error())
	}
	d := Device{Index: i}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("GPU %d: uuid: %s", i, ret.Error())
	}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		d.Name = "unknown"
	}
	if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		d.MemTotal, d.MemFree = mem.Total, mem.Free
	}
	d.Processes = processes(h)
	return d, nil
}

// processes lists compute and graphics processes on a GPU, best effort: a
// driver that does not support the query yields none.
func processes(h nvml.Device) []Process {
	var out []Process
	seen := map[uint32]bool{}
	for _, get := range []func() ([]nvml.ProcessInfo, nvml.Return){
		h.GetComputeRunningProcesses, h.GetGraphicsRunningProcesses,
	} {
		infos, ret := safeCall(get)
		if ret != nvml.SUCCESS {
			continue
		}
		for _, p := range infos {
			if seen[p.Pid] {
				continue
			}
			seen[p.Pid] = true
			out = append(out, Process{PID: int(p.Pid), Name: processName(int32(p.Pid)), UsedBytes: p.UsedGpuMemory})
		}
	}
	return out
}

// safeCall guards calls that mocks may leave unimplemented (the moq mocks
// panic on a nil func); a panic reads as "not supported".
func safeCall(get func() ([]nvml.ProcessInfo, nvml.Return)) (infos []nvml.ProcessInfo, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			infos, ret = nil, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return get()
}

// processName is the executable name of pid, "" when it is not visible
// (another PID namespace) or gone.
func processName(pid int32) string {
	p, err := process.NewProcess(pid)
	if err != nil {
		return ""
	}
	name, err := p.Name()
	if err != nil {
		return ""
	}
	return name
}
