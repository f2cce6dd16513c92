//go:build !linux

package hostcpu

import "errors"

var errNotLinux = errors.New("CPU engines (--device cpu) need Linux")

func affinity() ([]int, error) { return nil, errNotLinux }

// SetAffinity is Linux-only.
func SetAffinity(pid int, cpus []int) error { return errNotLinux }
