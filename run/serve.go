package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/warden/internal/argv"
	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/wardenproc"
)

// servedWarden is a `warden serve` started by --serve.
type servedWarden struct {
	proc *wardenproc.Proc
	url  string
}

// startRunWarden starts `warden serve` with the --serve arguments (plus a
// loopback --host, a free --port and a --log-dir where not given) in its
// own process group, so that the terminal's Ctrl-C goes to the agent only,
// and waits until it is ready.
func startRunWarden(ctx context.Context, o Options) (*servedWarden, error) {
	words, err := splitWords(o.Serve)
	if err != nil {
		return nil, fmt.Errorf("--serve %q: %v", o.Serve, err)
	}
	args, host, port, logDir, err := serveArgs(words)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--serve: finding the warden executable: %w", err)
	}
	logPath := o.ServeLog
	if logPath == "" {
		logPath = filepath.Join(logDir, "serve.log")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("--serve: %w", err)
	}
	fmt.Fprintf(o.Stderr, "warden run: starting warden serve %s (log %s)\n", strings.Join(args, " "), logPath)
	proc, err := wardenproc.Start(self, append([]string{"serve"}, args...), logPath) // its own group; SIGTERM to it if this process dies
	if err != nil {
		return nil, fmt.Errorf("--serve: %w", err)
	}
	sv := &servedWarden{proc: proc, url: wardenproc.URL(host, strconv.Itoa(port))}

	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if o.Wait > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(sctx, o.Wait)
		defer cancel()
	}
	_, err = wardenproc.Poll(sctx, &http.Client{Timeout: 3 * time.Second}, sv.url, 250*time.Millisecond, proc.Done())
	switch {
	case err == nil:
		fmt.Fprintf(o.Stderr, "warden run: the warden is ready at %s\n", sv.url)
		return sv, nil
	case errors.Is(err, wardenproc.ErrExited):
		return nil, fmt.Errorf("warden serve stopped before it was ready (%v); the end of %s:\n%s", proc.Err(), logPath, proc.Tail(15))
	}
	why := "interrupted"
	if ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		why = "not ready after --wait " + o.Wait.String()
	}
	sv.stop(o.Stderr)
	return nil, fmt.Errorf("warden serve %s; stopped it (log %s)", why, logPath)
}

// stop sends the warden SIGINT (it drains and stops its engines) and waits;
// after two minutes it kills its process group.
func (sv *servedWarden) stop(w io.Writer) {
	if sv.proc.Exited() {
		return
	}
	fmt.Fprintf(w, "warden run: stopping the warden started for this run (log %s)\n", sv.proc.Log())
	sv.proc.Stop(2 * time.Minute)
}

// serveArgs completes the --serve words: --host 127.0.0.1 and a free --port
// and a --log-dir when they are not given (inserted before a "--", whose
// rest goes to the engines). It returns the host, port and log dir the
// warden will use.
func serveArgs(words []string) (args []string, host string, port int, logDir string, err error) {
	flags, _, _ := argv.Split(words) // after a "--": the engines'
	end := len(flags)
	value := func(flag string) (string, bool) { // -flag V, --flag V, -flag=V, --flag=V; the last one wins, as in serve
		return argv.Value(flags, "-"+flag, "--"+flag)
	}
	var extra []string
	host, ok := value("host")
	if !ok {
		host = "127.0.0.1"
		extra = append(extra, "--host", host)
	}
	if p, ok := value("port"); ok {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return nil, "", 0, "", fmt.Errorf("--serve: --port %q is not a TCP port", p)
		}
	} else {
		if port, err = ports.Loopback(); err != nil {
			return nil, "", 0, "", fmt.Errorf("--serve: finding a free port: %w", err)
		}
		extra = append(extra, "--port", strconv.Itoa(port))
	}
	if logDir, ok = value("log-dir"); !ok {
		if logDir, err = wardenproc.NewRunDir(time.Now()); err != nil {
			return nil, "", 0, "", fmt.Errorf("--serve: the log folder: %w", err)
		}
		extra = append(extra, "--log-dir", logDir)
	}
	args = append(append(append([]string{}, words[:end]...), extra...), words[end:]...)
	return args, host, port, logDir, nil
}
