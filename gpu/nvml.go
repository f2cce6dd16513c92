//go:build linux && cgo

package gpu

import (
	"fmt"
	"strings"

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
	var handles []nvml.Device
	for i := 0; i < n; i++ {
		h, d, err := readDevice(lib, i)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
		handles = append(handles, h)
	}
	readLinks(lib, handles, devs)
	return devs, nil
}

// has reports whether the loaded NVML exports symbol. go-nvml loads the
// library lazily (RTLD_LAZY): calling a function an older driver lacks
// would end the process, so calls newer than the basics are guarded by it.
// A mock without Extensions answers false.
func has(lib nvml.Interface, symbol string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return lib.Extensions().LookupSymbol(symbol) == nil
}

// guard runs an NVML call that a mock may leave unimplemented (the moq
// mocks panic on a nil func); a panic reads as ERROR_NOT_SUPPORTED.
func guard[T any](call func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			var zero T
			v, ret = zero, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return call()
}

// busID is a PciInfo's bus id as a string ("00000000:01:00.0").
func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func readDevice(lib nvml.Interface, i int) (nvml.Device, Device, error) {
	h, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, Device{}, fmt.Errorf("GPU %d: handle: %s", i, ret.Error())
	}
	d := Device{Index: i}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return nil, Device{}, fmt.Errorf("GPU %d: uuid: %s", i, ret.Error())
	}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		d.Name = "unknown"
	}
	if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		d.MemTotal, d.MemFree = mem.Total, mem.Free
	}
	d.Processes = processes(h)
	if pci, ret := guard(h.GetPciInfo); ret == nvml.SUCCESS {
		d.PCIBusID = busID(pci)
	}
	if has(lib, "nvmlDeviceGetMigMode") {
		// current, pending; a card without MIG answers NOT_SUPPORTED.
		cur, _, ret := migMode(h)
		d.MIG = ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE
	}
	if has(lib, "nvmlDeviceGetNumaNodeId") {
		if node, ret := guard(h.GetNumaNodeId); ret == nvml.SUCCESS && node >= 0 {
			d.NUMANode = &node
		}
	}
	if d.NUMANode == nil {
		d.NUMANode = sysfsNUMANode(sysfsPCI, d.PCIBusID)
	}
	if has(lib, "nvmlDeviceGetCpuAffinity") {
		if set, ret := guard(func() ([]uint, nvml.Return) { return h.GetCpuAffinity(affinityCPUs) }); ret == nvml.SUCCESS {
			d.CPUAffinity = cpuList(set)
		}
	}
	return h, d, nil
}

// affinityCPUs is how many CPUs the affinity query covers.
const affinityCPUs = 4096

func migMode(h nvml.Device) (cur, pending int, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			cur, pending, ret = 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return h.GetMigMode()
}

// cpuList formats an NVML CPU bitmask (64 CPUs a word) as "0-15,32-47"; ""
// when empty.
func cpuList(words []uint) string {
	var parts []string
	start := -1
	bit := func(i int) bool { return words[i/64]&(1<<(uint(i)%64)) != 0 }
	n := len(words) * 64
	for i := 0; i <= n; i++ {
		on := i < n && bit(i)
		switch {
		case on && start < 0:
			start = i
		case !on && start >= 0:
			if start == i-1 {
				parts = append(parts, fmt.Sprint(start))
			} else {
				parts = append(parts, fmt.Sprintf("%d-%d", start, i-1))
			}
			start = -1
		}
	}
	return strings.Join(parts, ",")
}

// readLinks fills every device's Links: NVLink (links to the other card,
// directly or through NVSwitch, or NVML's NVLink P2P status) else the
// common PCIe ancestor, in nvidia-smi topo -m's notation.
func readLinks(lib nvml.Interface, hs []nvml.Device, devs []Device) {
	if len(devs) < 2 {
		return
	}
	nv := make([]nvlinks, len(hs))
	if has(lib, "nvmlDeviceGetNvLinkState") && has(lib, "nvmlDeviceGetNvLinkRemotePciInfo") {
		remoteType := has(lib, "nvmlDeviceGetNvLinkRemoteDeviceType")
		for i, h := range hs {
			nv[i] = readNVLinks(h, remoteType)
		}
	}
	ancestor := has(lib, "nvmlDeviceGetTopologyCommonAncestor")
	p2p := has(lib, "nvmlDeviceGetP2PStatus")
	for i := range devs {
		for j := range devs {
			if i == j {
				continue
			}
			n := nv[i].direct[normBus(devs[j].PCIBusID)]
			if n == 0 && nv[i].switched > 0 && nv[j].switched > 0 {
				n = min(nv[i].switched, nv[j].switched)
			}
			if n == 0 && p2p {
				if st, ret := guard(func() (nvml.GpuP2PStatus, nvml.Return) {
					return hs[i].GetP2PStatus(hs[j], nvml.P2P_CAPS_INDEX_NVLINK)
				}); ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
					n = 1
				}
			}
			p := ""
			switch {
			case n > 0:
				p = fmt.Sprintf("NV%d", n)
			case ancestor:
				if lvl, ret := guard(func() (nvml.GpuTopologyLevel, nvml.Return) {
					return hs[i].GetTopologyCommonAncestor(hs[j])
				}); ret == nvml.SUCCESS {
					p = levelPath(lvl)
				}
			}
			if p != "" {
				devs[i].Links = append(devs[i].Links, Link{GPU: devs[j].Index, Path: p})
			}
		}
	}
}

// nvlinks is one card's active NVLinks: to each directly linked card (by
// normalized bus id) and to NVSwitches.
type nvlinks struct {
	direct   map[string]int
	switched int
}

func readNVLinks(h nvml.Device, remoteType bool) nvlinks {
	out := nvlinks{direct: map[string]int{}}
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		st, ret := guard(func() (nvml.EnableState, nvml.Return) { return h.GetNvLinkState(l) })
		if ret == nvml.ERROR_NOT_SUPPORTED {
			break // no NVLink on this card
		}
		if ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
			continue // past the card's links (INVALID_ARGUMENT), or down
		}
		if remoteType {
			if t, ret := guard(func() (nvml.IntNvLinkDeviceType, nvml.Return) {
				return h.GetNvLinkRemoteDeviceType(l)
			}); ret == nvml.SUCCESS && t == nvml.NVLINK_DEVICE_TYPE_SWITCH {
				out.switched++
				continue
			}
		}
		if pci, ret := guard(func() (nvml.PciInfo, nvml.Return) { return h.GetNvLinkRemotePciInfo(l) }); ret == nvml.SUCCESS {
			out.direct[normBus(busID(pci))]++
		}
	}
	return out
}

// levelPath names an NVML topology level as nvidia-smi topo -m does.
func levelPath(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return "PIX"
	case nvml.TOPOLOGY_MULTIPLE:
		return "PXB"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PHB"
	case nvml.TOPOLOGY_NODE:
		return "NODE"
	case nvml.TOPOLOGY_SYSTEM:
		return "SYS"
	}
	return ""
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
