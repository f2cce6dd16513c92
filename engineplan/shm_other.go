//go:build !linux

package engineplan

// ShmPath is where vLLM maps a GPU engine's host KV tier from (Linux).
const ShmPath = "/dev/shm"

// ShmFree is unknown off Linux, where vLLM's CUDA engines do not run.
func ShmFree() (free uint64, ok bool) { return 0, false }
