//go:build linux

package engineplan

import "syscall"

// ShmPath is where vLLM maps a GPU engine's host KV tier from.
const ShmPath = "/dev/shm"

// ShmFree is the free space of ShmPath (what an unprivileged process may
// use of it); ok is false where it cannot be read.
func ShmFree() (free uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(ShmPath, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}
