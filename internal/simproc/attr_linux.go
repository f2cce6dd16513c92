package simproc

import "syscall"

// sysProcAttr puts a simulator in its own process group and kills it with
// the test process.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
