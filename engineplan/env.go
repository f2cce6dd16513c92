package engineplan

import "strings"

// What an engine's environment loses, besides CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER (replaced when the rank has GPUs): each rank is its own
// server, so nothing inherited from the shell may make it join a
// data-parallel group or fix its internal ports. From vLLM 0.32.0's
// envs.py and where it is read:
//
//   - VLLM_PORT: the base of vLLM's internal ports (utils/network_utils.py,
//     get_open_ports_list scans up from it); one value for every rank would
//     collide.
//   - VLLM_DP_RANK, VLLM_DP_RANK_LOCAL, VLLM_DP_SIZE, VLLM_DP_MASTER_IP,
//     VLLM_DP_MASTER_PORT: with no --data-parallel-size, config/parallel.py
//     (ParallelConfig.__post_init__) takes the data-parallel size, rank and
//     master from them ("offline SPMD"), so a server would wait for peers
//     (or, for a dense model, refuse); VLLM_DP_MASTER_PORT also reserves a
//     port range (network_utils._get_reserved_port_range). Every other
//     VLLM_DP_* goes too, for releases that add more.
//   - VLLM_ELASTIC_EP_SCALE_UP_LAUNCH: makes the engine core start as a
//     scale-up member of an existing expert-parallel group (v1/engine/core.py;
//     envs.py: "Should only be set by EngineCoreClient").
//
// Kept: VLLM_RANDOMIZE_DP_DUMMY_INPUTS (dummy inputs only), VLLM_HOST_IP
// (an address, no group), the torchrun variables RANK/LOCAL_RANK/
// WORLD_SIZE/MASTER_* (read only with --distributed-executor-backend
// external_launcher, v1/executor/uniproc_executor.py), and the KV
// connectors' side-channel ports (VLLM_NIXL_SIDE_CHANNEL_PORT and the like:
// they take effect only with a --kv-transfer-config, and vLLM offsets them
// by the data-parallel index, which is 0 for every rank here).
var droppedEnv = []string{"VLLM_PORT", "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH"}

const droppedEnvPrefix = "VLLM_DP_"

// CUDADeviceOrder is what engines with GPUs get in CUDA_DEVICE_ORDER, so
// that the indices in their CUDA_VISIBLE_DEVICES mean what nvidia-smi and
// NVML mean by them (CUDA's default order is fastest first). vLLM 0.32.0
// warns itself when the variable is unset on a machine with different cards
// (platforms/cuda.py, NvmlCudaPlatform.log_warnings).
const CUDADeviceOrder = "PCI_BUS_ID"

// dropped reports whether the variable kv ("NAME=value") is removed from
// every engine's environment.
func dropped(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	if strings.HasPrefix(name, droppedEnvPrefix) {
		return true
	}
	for _, d := range droppedEnv {
		if name == d {
			return true
		}
	}
	return false
}

// DroppedEnv names the variables of base that EngineEnv removes from every
// engine's environment, in base's order, each once: for the one log line
// that says so.
func DroppedEnv(base []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if dropped(kv) && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// EngineEnv is the environment of an engine: base without the variables
// that would make it join a data-parallel group or fix its internal ports
// (VLLM_PORT, VLLM_DP_*, ...; see DroppedEnv) and, when gpus is not empty,
// with CUDA_VISIBLE_DEVICES set to them (comma-separated NVML indices, see
// gpu.CUDAIndices) and CUDA_DEVICE_ORDER=PCI_BUS_ID, so that CUDA numbers the
// cards as NVML does; any inherited values of those two are replaced.
// Without gpus (CPU engines, the simulator) both are left as inherited.
func EngineEnv(base []string, gpus []string) []string {
	out := make([]string, 0, len(base)+2)
	for _, kv := range base {
		if dropped(kv) {
			continue
		}
		if len(gpus) > 0 && (strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") || strings.HasPrefix(kv, "CUDA_DEVICE_ORDER=")) {
			continue
		}
		out = append(out, kv)
	}
	if len(gpus) > 0 {
		out = append(out, "CUDA_VISIBLE_DEVICES="+strings.Join(gpus, ","), "CUDA_DEVICE_ORDER="+CUDADeviceOrder)
	}
	return out
}
