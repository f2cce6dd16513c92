package hostcpu

import (
	"os"
	"strconv"
	"strings"

	"github.com/shirou/gopsutil/v4/mem"
)

// Available is the memory the warden's engines may still take: the host's
// MemAvailable (gopsutil reads /proc/meminfo), capped by what the cgroup
// (v2 memory.max, or v1 limit_in_bytes) leaves.
func Available() (uint64, error) {
	vm, err := mem.VirtualMemory()
	if err != nil {
		return 0, err
	}
	avail := vm.Available
	if left, ok := cgroupLeft(); ok && left < avail {
		avail = left
	}
	return avail, nil
}

// cgroupLeft is the cgroup's memory limit minus its usage, when a limit is set.
func cgroupLeft() (uint64, bool) {
	for _, p := range [][2]string{
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
	} {
		limit, ok1 := readUint(p[0])
		used, ok2 := readUint(p[1])
		if !ok1 || !ok2 || limit >= 1<<60 { // "max", or v1's "no limit" value
			continue
		}
		if used >= limit {
			return 0, true
		}
		return limit - used, true
	}
	return 0, false
}

func readUint(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
