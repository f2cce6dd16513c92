//go:build linux

package launch

import "syscall"

// sysProcAttr puts the engine in its own process group and has the kernel
// send it SIGTERM when the thread that started it dies (a killed warden).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
