//go:build unix

package wardenproc

import "syscall"

// killGroup SIGKILLs every process in the group pgid (a serve child and the
// engines it started, all in the child's group).
func killGroup(pgid int) error { return syscall.Kill(-pgid, syscall.SIGKILL) }
