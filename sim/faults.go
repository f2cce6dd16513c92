package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// forkChild re-executes this binary as `warden sim child`, a process that
// sleeps until killed, standing in for vLLM's EngineCore. It stays in the
// sim's process group and has no Pdeathsig, so only a group kill (or the
// sim's own graceful exit, which SIGTERMs it) removes it. stop is that
// graceful part.
func (s *server) forkChild() (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fork child: %w", err)
	}
	cmd := exec.Command(exe, "sim", "child")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fork child: %w", err)
	}
	s.childPID = cmd.Process.Pid
	s.log.Info("EngineCore child started", "child_pid", s.childPID)
	go func() { _ = cmd.Wait() }()
	return func() { _ = cmd.Process.Signal(syscall.SIGTERM) }, nil
}

// ChildMain is `warden sim child`: block until ctx ends (a signal).
func ChildMain(ctx context.Context) error {
	<-ctx.Done()
	time.Sleep(10 * time.Millisecond)
	return nil
}
