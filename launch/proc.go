package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/lmwarden/warden/enginelog"
	"github.com/lmwarden/warden/hostcpu"
)

// proc is one run of an engine process (a rank has a new one per restart).
type proc struct {
	cmd     *exec.Cmd
	pid     int             // also the process group id
	tail    *enginelog.Tail // fed from the log file by follow
	started time.Time
	exited  chan struct{} // closed after Wait returned; err is set then
	drained chan struct{} // closed when tail has all the output written before exit
	err     error
	// shmFiles are the host KV tier files the engine mapped once it was
	// healthy (shmfiles.go); removed when its processes are gone.
	shmFiles []string
}

// followEvery is how often the log file is read for new engine output.
const followEvery = 50 * time.Millisecond

// spawn starts argv in its own process group from a goroutine locked to its
// OS thread for the life of the process: Pdeathsig fires when the thread that
// forked the child exits, and the Go runtime retires threads of unlocked
// goroutines. The goroutine reaps the process and closes exited.
//
// The engine writes straight into logf (no pipe): its log keeps what it
// prints even after a SIGKILLed warden (a broken pipe would make a Go
// engine die of SIGPIPE mid-shutdown), and orphans cannot hang Wait on a
// pipe. The last lines are read back from the file.
//
// cpus, when set, becomes the process's affinity mask right after the fork,
// before the engine has started a thread or a child (both inherit it).
func spawn(argv, env []string, logf *os.File, cpus []int) (*proc, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("empty command line")
	}
	from, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{cmd: cmd, tail: enginelog.NewTail(io.Discard), exited: make(chan struct{}), drained: make(chan struct{})}
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
		if len(cpus) > 0 {
			if err := hostcpu.SetAffinity(p.pid, cpus); err != nil {
				_ = signalGroup(p.pid, syscall.SIGKILL)
				_ = cmd.Wait()
				started <- fmt.Errorf("setting its CPU affinity to %s: %w", hostcpu.FormatList(cpus), err)
				return
			}
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	go p.follow(logf.Name(), from)
	return p, nil
}

// follow feeds the engine's output (the log file from offset from on) into
// p.tail until the process has exited, then reads the rest and closes drained.
func (p *proc) follow(path string, from int64) {
	defer close(p.drained)
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return
	}
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		_, _ = io.Copy(p.tail, f)
		select {
		case <-p.exited:
			_, _ = io.Copy(p.tail, f)
			return
		case <-t.C:
		}
	}
}

// lastLines waits until an exited process's output is read, then returns
// its last lines.
func (p *proc) lastLines() []string {
	if !p.alive() {
		<-p.drained
	}
	return p.tail.Lines()
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
