package main

import "syscall"

// sweepProcAttr puts a serve child in its own process group and has it sent
// SIGTERM (serve's graceful stop) if the sweep dies.
func sweepProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
