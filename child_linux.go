package main

import "syscall"

// childProcAttr puts a `warden serve` child (of sweep, or run --serve) in
// its own process group and has it sent SIGTERM (serve's graceful stop) if
// its parent dies; start it from a goroutine locked to its OS thread.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
