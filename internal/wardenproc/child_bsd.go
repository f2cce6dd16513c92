//go:build unix && !linux

package wardenproc

import "syscall"

// procAttr puts a `warden serve` child in its own process group (no
// Pdeathsig outside Linux: a killed parent leaves its serve running there).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
