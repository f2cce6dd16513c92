//go:build unix

package run

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalForeground reports whether warden's process group is the
// foreground group of its controlling terminal: then a SIGINT it gets came
// from the terminal, which sent it to the whole group.
func terminalForeground() bool {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer f.Close()
	pg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}
