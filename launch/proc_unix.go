//go:build unix

package launch

import (
	"errors"
	"syscall"
)

// signalGroup sends sig to every process in the group pgid. A group that no
// longer exists is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return nil
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

const sigTERM = syscall.SIGTERM
