//go:build !unix

package launch

import (
	"errors"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(pgid int, sig syscall.Signal) error {
	return errors.ErrUnsupported
}

const sigTERM = syscall.SIGTERM
