//go:build !unix

package launch

import (
	"context"
	"errors"
	"syscall"

	"github.com/shirou/gopsutil/v4/process"
)

func descendants(ctx context.Context, pid int) []*process.Process { return nil }

func killTree(ctx context.Context, pgid int, extra []*process.Process) []*process.Process {
	return nil
}

type processT = process.Process

// pidExists cannot tell here: the owner counts as alive (fail safe).
func pidExists(pid int) (bool, error) { return false, errors.ErrUnsupported }

func watchdogAttr() *syscall.SysProcAttr { return nil }
