package wardenproc

import "syscall"

// procAttr puts a `warden serve` child in its own process group and has it
// sent SIGTERM (serve's graceful stop) if its parent dies; start it from a
// goroutine locked to its OS thread (Start).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
