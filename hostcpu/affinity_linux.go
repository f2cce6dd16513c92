//go:build linux

package hostcpu

import "golang.org/x/sys/unix"

// affinity is the calling process's CPU affinity mask.
func affinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var ids []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			ids = append(ids, i)
		}
	}
	return ids, nil
}

// SetAffinity restricts process pid (and the threads and children it
// starts afterwards) to cpus.
func SetAffinity(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(pid, &set)
}
