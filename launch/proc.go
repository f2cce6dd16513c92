package launch

import (
	"errors"
	"io"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// proc is one run of an engine process (a rank has a new one per restart).
type proc struct {
	cmd     *exec.Cmd
	pid     int // also the process group id
	tail    *tailWriter
	started time.Time
	exited  chan struct{} // closed after Wait returned; err is set then
	err     error
}

// spawn starts argv in its own process group from a goroutine locked to its
// OS thread for the life of the process: Pdeathsig fires when the thread that
// forked the child exits, and the Go runtime retires threads of unlocked
// goroutines. The goroutine reaps the process and closes exited.
func spawn(argv, env []string, out io.Writer) (*proc, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("empty command line")
	}
	tail := newTailWriter(out)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = tail, tail
	cmd.SysProcAttr = sysProcAttr()
	// Orphans (EngineCore) may hold the output pipe; don't let them hang Wait.
	cmd.WaitDelay = 2 * time.Second
	p := &proc{cmd: cmd, tail: tail, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread must outlive the engine. When this
		// goroutine returns (after Wait) the runtime ends the thread, which
		// is harmless then.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		p.started = time.Now()
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// alive reports whether the process has not been reaped yet.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitReason says how the process ended, e.g. "exited with status 1" or
// "killed by signal killed". Only valid after exited is closed.
func (p *proc) exitReason() string {
	st := p.cmd.ProcessState
	if st == nil {
		if p.err != nil {
			return "failed: " + p.err.Error()
		}
		return "exited"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "exited with status " + itoa(st.ExitCode())
}

// signaled reports the signal that killed the process, 0 if none.
func (p *proc) signaled() syscall.Signal {
	if st := p.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}
