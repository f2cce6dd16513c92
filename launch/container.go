package launch

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/lmwarden/warden/engineplan"
)

// Engines in containers (--image; engineplan/container.go builds the
// command line). The rank's process is the runtime's CLI in the foreground
// (`docker run` without -d): its output is the container's, it forwards
// SIGTERM to the container (its signal proxy), and it gets SIGTERM when the
// warden dies (Pdeathsig), so the process handling of the other engines
// holds. What a process group cannot do, the runtime does:
//
//   - before each start, a container of the rank's name (one a restart or
//     a killed warden left) is removed;
//   - once the CLI has exited, the container's exit is read (OOM killed,
//     the runtime's own error) for the rank's error and log, then the
//     container is removed, stopped first if the CLI was killed before it;
//   - at the next warden's start, RemoveLeftovers removes the containers
//     of wardens that are gone (a SIGKILLed one: its CLIs stopped their
//     containers, which stay until removed), found by label.

// Container is a rank's container: Spec.Container.
type Container struct {
	Runtime string // the docker or podman executable
	Name    string // the container's name
	// CIDFile is where the CLI writes the container's id (its --cidfile);
	// "" = no watchdog.
	CIDFile string
}

// watchdogScript outlives the CLI it watches: once the CLI process ($1) is
// gone, it removes the container whose id the CLI wrote to $2, with the
// runtime $3. It reads the id while the CLI lives, so a container that a
// restart starts under the same name is never the one removed; a CLI that
// dies before writing an id leaves nothing running to remove.
const watchdogScript = `cli=$1 f=$2 rt=$3
while [ ! -s "$f" ]; do kill -0 "$cli" 2>/dev/null || exit 0; sleep 0.2; done
id=$(cat "$f")
while kill -0 "$cli" 2>/dev/null; do sleep 1; done
exec "$rt" rm -f "$id" >/dev/null 2>&1`

// watch starts the container's watchdog for the CLI process cli: a shell
// in a session of its own, not tied to the warden (no Pdeathsig, another
// process group), so that when the CLI is SIGKILLed together with the
// warden (kill -9 of both, the OOM killer, a process-group kill) the
// container is removed at once instead of holding its GPU and port until
// the next start. With the warden alive, afterExit removes the container
// first and the watchdog's removal finds nothing.
func (c *Container) watch(cli int) error {
	if c.CIDFile == "" {
		return nil
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "warden-watchdog", strconv.Itoa(cli), c.CIDFile, c.Runtime)
	cmd.SysProcAttr = watchdogAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the container's watchdog: %w", err)
	}
	go cmd.Wait() // reaped while the warden lives; init's after
	return nil
}

// runtimeTimeout bounds every runtime command the supervisor runs.
const runtimeTimeout = 60 * time.Second

func (c *Container) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runtimeTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Runtime, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", filepath.Base(c.Runtime), args[0], err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// remove removes the container, stopping it first (SIGKILL) if it runs; a
// container that is not there is no error.
func (c *Container) remove() error {
	_, err := c.run("rm", "-f", c.Name)
	if err != nil && (strings.Contains(err.Error(), "No such container") || strings.Contains(err.Error(), "no such container")) {
		return nil
	}
	return err
}

// exit reads why the container ended, for the rank's error: the cause
// ("" none beyond the exit status) and what to do.
func (c *Container) exit() (cause, hint string) {
	out, err := c.run("inspect", "--format", "{{.State.Status}}|{{.State.OOMKilled}}|{{.State.ExitCode}}|{{.State.Error}}", c.Name)
	if err != nil {
		return "", ""
	}
	f := strings.SplitN(out, "|", 4)
	if len(f) < 4 {
		return "", ""
	}
	switch {
	case f[1] == "true":
		return "its container was killed for lack of memory (OOMKilled)", "the engine's container ran out of memory: " +
			"check the host's RAM (`dmesg` names the OOM killer), a --memory limit of the runtime, and --kv-offload"
	case f[3] != "":
		return "the container runtime: " + f[3], ""
	}
	return "", ""
}

// beforeStart removes a container of the rank's name that a restart or a
// killed warden left. Supervisor goroutine only.
func (r *rank) beforeStart() error {
	r.exitCause, r.exitHint = "", ""
	if c := r.spec.Container; c != nil {
		if err := c.remove(); err != nil {
			return fmt.Errorf("removing the old container %s: %w", c.Name, err)
		}
		if c.CIDFile != "" { // the runtime refuses to overwrite it
			if err := os.Remove(c.CIDFile); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("removing the old container's id file: %w", err)
			}
		}
	}
	return nil
}

// afterExit reads the container's exit, then removes it. Called once the
// rank's CLI has exited; supervisor goroutine only.
func (r *rank) afterExit() {
	c := r.spec.Container
	if c == nil {
		return
	}
	r.exitCause, r.exitHint = c.exit()
	if r.exitCause != "" {
		fmt.Fprintf(r.logf, "=== warden: container %s of rank %d: %s ===\n", c.Name, r.spec.Rank, r.exitCause)
	}
	if err := c.remove(); err != nil {
		r.log.Warn("removing the engine's container", "container", c.Name, "err", err)
	}
}

// withExit adds the container's exit cause to a crash reason.
func (r *rank) withExit(reason string) string {
	if r.exitCause != "" {
		return reason + ": " + r.exitCause
	}
	return reason
}

// withExitError adds the container's exit cause and hint to a startup error.
func (r *rank) withExitError(se *StartupError) *StartupError {
	if r.exitCause != "" {
		se.Cause += ": " + r.exitCause
	}
	if r.exitHint != "" {
		se.Hint = r.exitHint
	}
	return se
}

// Owner is this warden process as engineplan.LabelOwner names it on its
// containers: host/pid/start (the process's start time in ms), so that a
// later warden tells a live owner from a dead one, and one that reused the
// pid from the owner.
func Owner() string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return host + "/" + strconv.Itoa(pid) + "/" + strconv.FormatInt(startMillis(pid), 10)
}

func startMillis(pid int) int64 {
	ms, _ := hostProcs.start(pid)
	return ms
}

// ownerGone reports whether the warden that owner names is no longer
// running on this host; a container of another host (a shared daemon) is
// never taken for a leftover.
func ownerGone(owner string) bool {
	host, _ := os.Hostname()
	return ownerGoneBy(owner, host, os.Getpid(), hostProcs)
}

// procProbe is what the owner check reads of a process, a seam for tests.
type procProbe struct {
	// exists: the pid names a process (even one we may not read); an
	// error when that cannot be told.
	exists func(pid int) (bool, error)
	// start is the process's start time in ms; an error when it cannot be
	// read (/proc mounted with hidepid, another user's process).
	start func(pid int) (int64, error)
	// zombie: the process has exited and waits to be reaped.
	zombie func(pid int) (bool, error)
}

// hostProcs reads this host's processes.
var hostProcs = procProbe{
	exists: pidExists,
	start: func(pid int) (int64, error) {
		p, err := process.NewProcess(int32(pid))
		if err != nil {
			return 0, err
		}
		ms, err := p.CreateTime()
		if err == nil && ms <= 0 {
			err = fmt.Errorf("no start time for pid %d", pid)
		}
		return ms, err
	},
	zombie: func(pid int) (bool, error) {
		p, err := process.NewProcess(int32(pid))
		if err != nil {
			return false, err
		}
		st, err := p.Status()
		return slices.Contains(st, process.Zombie), err
	},
}

// ownerGoneBy is ownerGone's rule, failing safe: a container is a
// leftover only when its owner provably is not running: no process has its
// pid, the process there is a zombie (it exited; its containers are
// orphans), or a process started at another time holds the pid (reused).
// Whatever cannot be read (the start time behind a hidden /proc, an
// unknown label) counts as a live owner: removing a live warden's engines
// is worse than leaving a dead one's until the next start.
func ownerGoneBy(owner, host string, self int, p procProbe) bool {
	f := strings.Split(owner, "/")
	if len(f) != 3 || f[0] != host {
		return false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 || pid == self {
		return false
	}
	if ok, err := p.exists(pid); err != nil || !ok {
		return err == nil
	}
	if z, err := p.zombie(pid); err == nil && z {
		return true
	}
	ms, err := p.start(pid)
	if err != nil {
		return false
	}
	return strconv.FormatInt(ms, 10) != f[2]
}

// RemoveLeftovers removes the containers that wardens which are gone left
// behind (a SIGKILLed warden's), found by their owner label, and logs one
// line naming them; containers of running wardens stay. It returns the
// names it removed.
func RemoveLeftovers(ctx context.Context, runtime string, log *slog.Logger) ([]string, error) {
	c := &Container{Runtime: runtime}
	owner := `{{.Label "` + engineplan.LabelOwner + `"}}`
	if engineplan.IsPodman(runtime) {
		owner = `{{index .Labels "` + engineplan.LabelOwner + `"}}` // Podman's ps has no Label method
	}
	out, err := c.run("ps", "-a", "--filter", "label="+engineplan.LabelOwner, "--format", `{{.ID}}|{{.Names}}|`+owner)
	if err != nil {
		return nil, fmt.Errorf("listing the containers of earlier wardens: %w", err)
	}
	var ids, names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) == 3 && ownerGone(f[2]) {
			ids, names = append(ids, f[0]), append(names, f[1])
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if _, err := c.run(append([]string{"rm", "-f"}, ids...)...); err != nil {
		return nil, fmt.Errorf("removing the containers a stopped warden left (%s): %w", strings.Join(names, ", "), err)
	}
	log.Info(fmt.Sprintf("removed %d engine containers that a warden which is gone left behind", len(names)),
		"containers", strings.Join(names, ","))
	return names, nil
}
