//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr puts the engine in its own process group. There is no
// Pdeathsig outside Linux; replica routing is Linux-only, and the simulator
// is stopped by Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
