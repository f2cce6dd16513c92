// Package gpu owns GPU discovery and assignment for warden: it lists the
// NVIDIA GPUs of this machine (NVML through go-nvml on linux+cgo builds, else
// `nvidia-smi`), with their memory and the processes using them; it narrows
// them to the visible set (CUDA_VISIBLE_DEVICES, --gpus); it cuts them into
// one contiguous group of tp GPUs per data-parallel rank; and it warns when a
// chosen GPU is already busy. It also provides the `warden gpus` command.
//
// Without a driver, Discover returns ErrNoGPU, whose message names
// `--engine sim`; nothing here ever calls NVML past a failed Init (that kills
// the process).
package gpu
