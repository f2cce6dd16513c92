//go:build !unix

package wardenproc

import (
	"errors"
	"os"
	"syscall"
)

// procAttr is nil outside Unix: there are no process groups to put a child in.
func procAttr() *syscall.SysProcAttr { return nil }

// killGroup kills the child only: outside Unix there is no process group to
// reach its engines through (and serve refuses to start engines there).
func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return errors.Join(p.Kill(), p.Release())
}
