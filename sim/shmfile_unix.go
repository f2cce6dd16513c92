//go:build unix

package sim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// offloadFile stands in for the file vLLM 0.27 and later back an engine's
// host KV tier with (v1/kv_offload/cpu/shared_offload_region.py:
// /dev/shm/vllm_offload_<uuid4>.mmap, the tier's size, mapped by every
// worker): created sparse (it holds no memory) and one page of it mapped, so
// that /proc/PID/maps shows it as vLLM's does. mode keep is 0.27-0.28's (the
// file stays linked until a clean exit, so a killed engine leaves it),
// unlink 0.29's (unlinked once mapped). The returned stop unmaps it and, for
// keep, removes it, as a clean shutdown does.
func offloadFile(dir, mode string, size int64) (path string, stop func(), err error) {
	if dir == "" {
		dir = "/dev/shm"
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "vllm_offload_"+hex.EncodeToString(id)+".mmap")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("the host KV tier's file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(max(size, 4096)); err != nil {
		os.Remove(path)
		return "", nil, fmt.Errorf("the host KV tier's file: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return "", nil, fmt.Errorf("mapping the host KV tier's file: %w", err)
	}
	if mode == "unlink" {
		os.Remove(path)
	}
	return path, func() {
		_ = syscall.Munmap(mem)
		if mode == "keep" {
			os.Remove(path)
		}
	}, nil
}
