//go:build unix

package launch

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// descendants returns every live descendant of pid, found with gopsutil v4
// (which reads /proc; v3 shelled out to pgrep and found nothing without it).
// Taken before a stop, it lets Stop find children that left the group.
func descendants(ctx context.Context, pid int) []*process.Process {
	root, err := process.NewProcessWithContext(ctx, int32(pid))
	if err != nil {
		return nil
	}
	var out []*process.Process
	queue := []*process.Process{root}
	for len(queue) > 0 && len(out) < 10000 {
		kids, _ := queue[0].ChildrenWithContext(ctx)
		queue = append(queue[1:], kids...)
		out = append(out, kids...)
	}
	return out
}

// live reports whether p still exists as the same process (create time
// checked, so a reused pid does not count) and is not a zombie.
func live(ctx context.Context, p *process.Process) bool {
	if ok, err := p.IsRunningWithContext(ctx); err != nil || !ok {
		return false
	}
	st, err := p.StatusWithContext(ctx)
	return err != nil || !slices.Contains(st, process.Zombie)
}

// groupMembers returns the live, non-zombie processes in process group pgid.
func groupMembers(ctx context.Context, pgid int) []*process.Process {
	pids, err := process.PidsWithContext(ctx)
	if err != nil {
		return nil
	}
	var out []*process.Process
	for _, pid := range pids {
		if g, err := syscall.Getpgid(int(pid)); err != nil || g != pgid {
			continue
		}
		if p, err := process.NewProcessWithContext(ctx, pid); err == nil && live(ctx, p) {
			out = append(out, p)
		}
	}
	return out
}

// killTree sends SIGKILL to group pgid and to every process of extra, and
// waits until none of them is left (zombies count as gone: they hold no
// memory and their parent or init reaps them). It returns the survivors
// when ctx ends first.
func killTree(ctx context.Context, pgid int, extra []*process.Process) []*process.Process {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = signalGroup(pgid, syscall.SIGKILL)
		var left []*process.Process
		for _, p := range extra {
			if live(ctx, p) {
				_ = p.SendSignalWithContext(ctx, syscall.SIGKILL)
				left = append(left, p)
			}
		}
		left = append(left, groupMembers(ctx, pgid)...)
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return left
		case <-tick.C:
		}
	}
}

type processT = process.Process

// pidExists reports whether pid names a process, by signal 0: ESRCH says
// none, EPERM one of another user (it exists). It reads no /proc, so a
// hidden /proc does not make a live process look gone.
func pidExists(pid int) (bool, error) {
	switch err := syscall.Kill(pid, 0); {
	case err == nil, errors.Is(err, syscall.EPERM):
		return true, nil
	case errors.Is(err, syscall.ESRCH):
		return false, nil
	default:
		return false, err
	}
}

// watchdogAttr puts a container's watchdog in a session of its own: no
// signal to the warden's group or terminal reaches it.
func watchdogAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
