//go:build !linux

package main

import "syscall"

// childProcAttr puts a `warden serve` child in its own process group (no
// Pdeathsig outside Linux: a killed parent leaves its serve running there).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
