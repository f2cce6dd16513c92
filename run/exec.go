package run

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// execAgent runs the agent in the foreground and returns its exit code.
// The agent stays in warden's process group, so a Ctrl-C or Ctrl-\ on the
// terminal reaches it (and its own children) directly, as without warden;
// warden ignores those itself. A signal sent to warden alone (SIGTERM,
// SIGHUP, or SIGINT/SIGQUIT when warden is not the terminal's foreground
// job, e.g. from `timeout` or a supervisor) is passed on to the agent.
func execAgent(argv []string, env []string, o Options) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if (s == syscall.SIGINT || s == syscall.SIGQUIT) && terminalForeground() {
					continue // the terminal sent it to the agent too
				}
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	return agentExitCode(cmd.ProcessState, err)
}

// agentExitCode is a finished process's exit code, 128+N for a death by signal N.
func agentExitCode(ps *os.ProcessState, err error) (int, error) {
	if ps == nil {
		return 1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}
