package gpu

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoGPU means no NVIDIA GPU could be found: no NVML library (no driver)
// and no working nvidia-smi, or a driver that reports zero devices.
var ErrNoGPU = errors.New("no NVIDIA GPU found (no NVIDIA driver, NVML or nvidia-smi); " +
	"to run without GPUs use --engine sim")

// Process is one process holding memory on a GPU.
type Process struct {
	PID       int    `json:"pid"`
	Name      string `json:"name"`       // executable name; "" when unknown (e.g. another PID namespace)
	UsedBytes uint64 `json:"used_bytes"` // 0 when the driver does not say
}

// Device is one physical GPU as the driver reports it.
type Device struct {
	Index     int       `json:"index"` // NVML (PCI bus) order, as nvidia-smi shows it; what engines get in CUDA_VISIBLE_DEVICES
	UUID      string    `json:"uuid"`  // "GPU-..."; stable across reboots, for humans and for matching
	Name      string    `json:"name"`
	MemTotal  uint64    `json:"mem_total_bytes"`
	MemFree   uint64    `json:"mem_free_bytes"`
	Processes []Process `json:"processes"`

	PCIBusID string `json:"pci_bus_id,omitempty"` // "00000000:01:00.0" as NVML writes it; "" when unknown
	// MIG is true when the card's current MIG mode is enabled: it is then
	// cut into instances, and vLLM cannot use it as a whole.
	MIG bool `json:"mig_enabled"`
	// NUMANode is the NUMA node the card is attached to; nil when unknown
	// (single-node machines often report none).
	NUMANode *int `json:"numa_node,omitempty"`
	// CPUAffinity is the CPUs closest to the card, as a list ("0-15,32-47");
	// "" when unknown.
	CPUAffinity string `json:"cpu_affinity,omitempty"`
	// Links is the path to every other GPU, in nvidia-smi topo -m's
	// notation; empty when the driver does not say (nvidia-smi fallback).
	Links []Link `json:"links,omitempty"`
}

// Link is the path from one GPU to another, as `nvidia-smi topo -m` names
// it: "NV<n>" (n NVLinks, directly or through NVSwitch), "PIX" (one PCIe
// switch, or the same board), "PXB" (several PCIe switches), "PHB" (the
// CPU's host bridge), "NODE" (host bridges within one NUMA node) or "SYS"
// (across CPU sockets: the inter-socket link).
type Link struct {
	GPU  int    `json:"gpu"` // the other GPU's index
	Path string `json:"path"`
}

// Discover lists the GPUs of this machine, in index order. It tries NVML
// (linux+cgo builds only), then `nvidia-smi` on PATH. When neither works, or
// the driver reports no device, the error wraps ErrNoGPU and says what was tried.
func Discover(ctx context.Context) ([]Device, error) {
	return discover(ctx, discoverNVML, "nvidia-smi")
}

// discover is Discover with its sources injected: nvmlFn (nil: skip) and the
// nvidia-smi command name or path ("": skip).
func discover(ctx context.Context, nvmlFn func() ([]Device, error), smi string) ([]Device, error) {
	var tried []string
	if nvmlFn != nil {
		devs, err := nvmlFn()
		if err == nil && len(devs) > 0 {
			return devs, nil
		}
		tried = append(tried, "NVML: "+describe(err))
	}
	if smi != "" {
		devs, err := discoverSMI(ctx, smi)
		if err == nil && len(devs) > 0 {
			return devs, nil
		}
		tried = append(tried, "nvidia-smi: "+describe(err))
	}
	if len(tried) == 0 {
		return nil, ErrNoGPU
	}
	return nil, fmt.Errorf("%w; tried:\n  %s", ErrNoGPU, strings.Join(tried, "\n  ")) // a line each
}

func describe(err error) string {
	if err == nil {
		return "no devices"
	}
	return err.Error()
}

// Select narrows devs to the GPUs this run may use. cudaVisible is the
// CUDA_VISIBLE_DEVICES value and gpusFlag the --gpus value; both are comma
// lists of indices (as `warden gpus` shows them) or UUIDs (a unique prefix
// such as "GPU-8f2a" is enough, as CUDA accepts). An empty list means "all".
// When both are set, --gpus must name GPUs that CUDA_VISIBLE_DEVICES allows.
// The result keeps the order the last non-empty list gives. Unknown,
// duplicate or MIG entries are errors that name the entry.
func Select(devs []Device, cudaVisible, gpusFlag string) ([]Device, error) {
	out := devs
	if strings.TrimSpace(cudaVisible) != "" {
		sel, err := pick(out, cudaVisible)
		if err != nil {
			return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%q: %w", cudaVisible, err)
		}
		out = sel
	}
	if strings.TrimSpace(gpusFlag) != "" {
		sel, err := pick(out, gpusFlag)
		if err != nil {
			if strings.TrimSpace(cudaVisible) != "" {
				return nil, fmt.Errorf("--gpus %q (within CUDA_VISIBLE_DEVICES=%q): %w", gpusFlag, cudaVisible, err)
			}
			return nil, fmt.Errorf("--gpus %q: %w", gpusFlag, err)
		}
		out = sel
	}
	return append([]Device(nil), out...), nil
}

// pick returns the devices named by list, in list order.
func pick(devs []Device, list string) ([]Device, error) {
	var out []Device
	seen := map[int]bool{}
	for _, raw := range strings.Split(list, ",") {
		id := strings.TrimSpace(raw)
		if id == "" {
			continue
		}
		d, err := find(devs, id)
		if err != nil {
			return nil, err
		}
		if seen[d.Index] {
			return nil, fmt.Errorf("GPU %s is listed twice", id)
		}
		seen[d.Index] = true
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("names no GPU")
	}
	return out, nil
}

func find(devs []Device, id string) (Device, error) {
	if strings.HasPrefix(strings.ToUpper(id), "MIG-") {
		return Device{}, fmt.Errorf("%s: MIG instances are not supported; name whole GPUs", id)
	}
	if n, err := strconv.Atoi(id); err == nil {
		for _, d := range devs {
			if d.Index == n {
				return d, nil
			}
		}
		return Device{}, fmt.Errorf("no GPU with index %d (have %s)", n, indexList(devs))
	}
	var hits []Device
	for _, d := range devs {
		if d.UUID != "" && strings.HasPrefix(strings.ToLower(d.UUID), strings.ToLower(id)) {
			hits = append(hits, d)
		}
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		return Device{}, fmt.Errorf("no GPU with UUID %s (have %s)", id, indexList(devs))
	default:
		return Device{}, fmt.Errorf("UUID prefix %s matches %d GPUs; give more of it", id, len(hits))
	}
}

func indexList(devs []Device) string {
	if len(devs) == 0 {
		return "none"
	}
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = strconv.Itoa(d.Index)
	}
	return "GPU " + strings.Join(parts, ", ")
}

// Assign cuts devs into dp contiguous groups of tp GPUs each, in order:
// rank r gets devs[r*tp : (r+1)*tp]. GPUs beyond dp*tp stay unused. dp and tp
// must be >= 1; too few GPUs is an error that says how many are needed and
// which were found.
func Assign(devs []Device, dp, tp int) ([][]Device, error) {
	if dp < 1 || tp < 1 {
		return nil, fmt.Errorf("--dp and --tp must be at least 1 (got dp=%d, tp=%d)", dp, tp)
	}
	need := dp * tp
	if len(devs) < need {
		avail := fmt.Sprintf("%d are", len(devs))
		if len(devs) == 1 {
			avail = "1 is"
		}
		gpus := "GPUs"
		if need == 1 {
			gpus = "GPU"
		}
		return nil, fmt.Errorf("need %d %s (--dp %d x --tp %d) but %s available (%s); "+
			"lower --dp/--tp, check --gpus and CUDA_VISIBLE_DEVICES, or use --engine sim",
			need, gpus, dp, tp, avail, indexList(devs))
	}
	groups := make([][]Device, dp)
	for r := range groups {
		groups[r] = append([]Device(nil), devs[r*tp:(r+1)*tp]...)
	}
	return groups, nil
}

// busyUnseen is how much used memory, with no process the driver lists, makes
// a GPU count as busy (processes in other containers are invisible to NVML).
const busyUnseen = 1 << 30

// BusyWarnings returns one line per process already on a GPU of groups, e.g.
// "GPU 2 is in use by python3 (pid 1234, 14.1 GiB)", and one line per GPU
// with more than 1 GiB in use by processes the driver does not list. Nil when
// every GPU is idle.
func BusyWarnings(groups [][]Device) []string {
	var out []string
	for _, g := range groups {
		for _, d := range g {
			for _, p := range d.Processes {
				name := p.Name
				if name == "" {
					name = "an unknown process"
				}
				detail := fmt.Sprintf("pid %d", p.PID)
				if p.UsedBytes > 0 {
					detail += ", " + GiB(p.UsedBytes)
				}
				out = append(out, fmt.Sprintf("GPU %d is in use by %s (%s)", d.Index, name, detail))
			}
			used := d.MemTotal - min(d.MemFree, d.MemTotal)
			if len(d.Processes) == 0 && d.MemTotal > 0 && used > busyUnseen {
				out = append(out, fmt.Sprintf("GPU %d has %s of %s in use by processes not visible here "+
					"(another container?)", d.Index, GiB(used), GiB(d.MemTotal)))
			}
		}
	}
	return out
}

// CUDAIndices is what an engine on group gets in CUDA_VISIBLE_DEVICES: the
// cards' NVML indices (PCI bus order, as nvidia-smi numbers them), to be
// read with CUDA_DEVICE_ORDER=PCI_BUS_ID (engineplan.EngineEnv sets it; CUDA's
// own default order is fastest first, where an index could name another
// card). Indices, not UUIDs: vLLM releases before about 0.24 parse each
// entry with int() and die on a UUID; vLLM 0.32.0 accepts both and maps a
// UUID to its NVML index itself (platforms/cuda.py,
// NvmlCudaPlatform.device_control_id_to_physical_device_id).
func CUDAIndices(group []Device) []string {
	out := make([]string, len(group))
	for i, d := range group {
		out[i] = strconv.Itoa(d.Index)
	}
	return out
}

// VisibleDevices names a group's cards for humans: their UUIDs (stable
// across reboots and driver reorderings), or the index where a UUID is
// unknown. Engines get CUDAIndices instead.
func VisibleDevices(group []Device) []string {
	out := make([]string, len(group))
	for i, d := range group {
		out[i] = d.UUID
		if out[i] == "" {
			out[i] = strconv.Itoa(d.Index)
		}
	}
	return out
}

// GiB formats a byte count as "14.1 GiB".
func GiB(b uint64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
