//go:build !linux

package main

import "syscall"

// sweepProcAttr puts a serve child in its own process group (no Pdeathsig
// outside Linux: a killed sweep leaves its serve running there).
func sweepProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
