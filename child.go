package main

import (
	"os/exec"
	"runtime"
)

// child is a started `warden serve` (or other) child process.
type child struct {
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, set before done is closed
}

// startChild starts cmd with childProcAttr (its own process group, SIGTERM
// if this process dies) from a goroutine locked to its OS thread for the
// child's whole life: Linux's Pdeathsig fires when the thread that forked
// the child exits, and Go retires the threads of unlocked goroutines.
func startChild(cmd *exec.Cmd) (*child, error) {
	cmd.SysProcAttr = childProcAttr()
	c := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}
