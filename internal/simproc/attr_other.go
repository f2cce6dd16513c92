//go:build !linux

package simproc

import "syscall"

// sysProcAttr puts a simulator in its own process group. Without Pdeathsig
// (Linux only) the t.Cleanup group kill is what removes it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
