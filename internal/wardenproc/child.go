package wardenproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Proc is a `warden serve` child.
type Proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, set before done is closed
}

// Start runs exe with args (this program: "serve", flags) in its own
// process group, so that the terminal's Ctrl-C reaches its parent only, with
// stdout and stderr into a new file at logPath. The child gets SIGTERM
// (serve's graceful stop) if this process dies: Linux's Pdeathsig, set from
// a goroutine locked to its OS thread for the child's whole life, because
// Pdeathsig fires when the thread that forked the child exits and Go retires
// the threads of unlocked goroutines. A killed parent leaves nothing running.
func Start(exe string, args []string, logPath string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	p := &Proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Done is closed once the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the child exited (Wait's result), once Done is closed.
func (p *Proc) Err() error { return p.err }

// Log is the path of the child's output.
func (p *Proc) Log() string { return p.log }

// Stop sends SIGINT (serve's graceful stop: drain, engines down, summary)
// and waits; after grace it SIGKILLs the child's process group (its engines
// then get SIGTERM from their own Pdeathsig). A child that has exited is
// left as it is.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = killGroup(p.cmd.Process.Pid)
		<-p.done
	}
}

// Reason is why the child stopped, read from its output: the last line
// that names a failure ("warden serve:" or level=ERROR) with the last engine
// log line serve quoted after it ("  | ..."), else how it exited.
func (p *Proc) Reason() string {
	last, cause := "", ""
	if f, err := os.Open(p.log); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.Contains(line, "warden serve:") || strings.Contains(line, "level=ERROR"):
				last, cause = line, ""
			case last != "" && strings.HasPrefix(line, "  | "):
				cause = strings.TrimSpace(strings.TrimPrefix(line, "  | "))
			}
		}
		f.Close()
	}
	switch {
	case last != "" && cause != "":
		return last + " (" + cause + ")"
	case last != "":
		return last
	}
	return "serve exited: " + fmt.Sprint(p.err)
}

// Tail is the last n lines of the child's output.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
