package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/hostcpu"
)

// Spec is one rank's engine: what to run, where it listens, where it logs.
type Spec struct {
	Rank    int
	Argv    []string // full command line, e.g. Engine.Argv(Port)
	Env     []string // added to os.Environ(); VLLM_PORT is always dropped
	Port    int      // the engine's HTTP port on 127.0.0.1
	LogPath string   // the rank's log file (appended; its directory is created)
	GPUs    []string // CUDA_VISIBLE_DEVICES for the rank (UUIDs or indices); empty: left as inherited
	CPUs    []int    // CPU engines: the affinity mask of the rank's processes; empty: inherited
	// Container: Argv runs the engine in this container (the runtime's CLI
	// in the foreground, container.go); nil a host process.
	Container *Container
}

// deviceEnv says, for the rank's log, what the engine was given: its
// CUDA_VISIBLE_DEVICES, or its CPU affinity and binding variables.
func (s Spec) deviceEnv() string {
	if len(s.CPUs) > 0 {
		return strings.Join(append([]string{"affinity " + hostcpu.FormatList(s.CPUs)}, s.Env...), " ")
	}
	return "CUDA_VISIBLE_DEVICES=" + strings.Join(s.GPUs, ",")
}

// where names what the rank runs on, for logs and errors: "GPU 0,1",
// "CPU 0-3", or "" (the simulator).
func (s Spec) where() string {
	switch {
	case len(s.GPUs) > 0:
		return "GPU " + strings.Join(s.GPUs, ",")
	case len(s.CPUs) > 0:
		return "CPU " + hostcpu.FormatList(s.CPUs)
	}
	return ""
}

// The defaults of the Options that `warden serve` gives flags, stated once
// (the command layer gives its flags these values; a zero field means the
// same).
const (
	// DefaultStartupTimeout is long enough for a large model's load (and
	// vLLM's compile and CUDA-graph capture) from a cold disk.
	DefaultStartupTimeout = 20 * time.Minute
	// DefaultStopGrace gives vLLM time to end its engine core processes
	// and free the GPU before SIGKILL.
	DefaultStopGrace = 20 * time.Second
)

// Options tune Start. Zero values take the defaults in parentheses.
type Options struct {
	StartupTimeout time.Duration // per start and restart, until /health is 200 (DefaultStartupTimeout)
	StopGrace      time.Duration // SIGTERM to SIGKILL (DefaultStopGrace)
	RestartMin     time.Duration // first restart delay, doubled per failure in a row (1s)
	RestartMax     time.Duration // longest restart delay (1m)
	// StableAfter: an engine healthy this long before it crashes was no
	// crash loop; its failures in a row and the delay start afresh (1m).
	StableAfter time.Duration
	// CrashLoopAfter is the failures in a row after which a rank's cause
	// and its fix are logged once, as an error, instead of per restart (3).
	CrashLoopAfter int
	PollInterval   time.Duration // /health poll while starting (250ms)
	Logger         *slog.Logger  // (discard)
	// Progress gets the live startup display: redrawn in place on a
	// terminal, else one plain line per change. Nil: none.
	Progress io.Writer
	// OnState is called on every state change of a rank, from that rank's
	// supervisor goroutine; it must not block. Nil: none.
	OnState func(rank int, s State, reason string)
	// OnCrash is called on every crash and failed restart of a rank,
	// before the wait for the next restart, from that rank's supervisor
	// goroutine; it must not block. Nil: none.
	OnCrash func(rank int, c Crash)
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.StartupTimeout, DefaultStartupTimeout)
	def(&o.StopGrace, DefaultStopGrace)
	def(&o.RestartMin, time.Second)
	def(&o.RestartMax, time.Minute)
	def(&o.PollInterval, 250*time.Millisecond)
	def(&o.StableAfter, time.Minute)
	if o.CrashLoopAfter <= 0 {
		o.CrashLoopAfter = 3
	}
	if o.RestartMax < o.RestartMin {
		o.RestartMax = o.RestartMin
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Group is the set of running engines returned by Start.
type Group struct {
	opts   Options
	log    *slog.Logger
	ranks  []*rank
	client *http.Client

	stopOnce  sync.Once
	stopping  chan struct{} // closed when Stop begins
	forceOnce sync.Once
	force     chan struct{} // closed when Stop's ctx ends: skip the grace
	wg        sync.WaitGroup
	done      chan struct{} // closed when every rank's supervisor returned
}

// rank is one rank's supervised engine. state, cur, restarts and crash are written
// only by the rank's supervisor goroutine; mu guards reads from elsewhere.
type rank struct {
	spec Spec
	env  []string
	logf *os.File
	log  *slog.Logger

	// lines and counted: how many lines the log file has, counted up to
	// byte counted (logLines; supervisor goroutine only).
	lines   int
	counted int64

	// exitCause and exitHint: why the rank's container ended, read by
	// afterExit (container.go; supervisor goroutine only).
	exitCause, exitHint string

	mu       sync.Mutex
	state    State
	since    time.Time
	cur      *proc
	restarts int
	crash    Crash // the latest, when crashed
	crashed  bool
}

// Start launches every spec in parallel and returns when all are healthy.
// If a rank exits or is not healthy within StartupTimeout, or ctx ends, it
// stops every engine and returns a *StartupError (or ctx's error). After
// Start returns, ctx no longer matters: call Stop.
func Start(ctx context.Context, specs []Spec, opts Options) (*Group, error) {
	opts.defaults()
	if err := validate(specs); err != nil {
		return nil, err
	}
	g := &Group{
		opts: opts, log: opts.Logger,
		client:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second},
		stopping: make(chan struct{}), force: make(chan struct{}), done: make(chan struct{}),
	}
	for _, s := range specs {
		r, err := g.newRank(s)
		if err != nil {
			g.closeLogs()
			return nil, err
		}
		g.ranks = append(g.ranks, r)
	}
	results := make(chan error, len(specs))
	g.wg.Add(len(g.ranks))
	for _, r := range g.ranks {
		go g.run(r, results)
	}
	go func() {
		g.wg.Wait()
		g.closeLogs()
		close(g.done)
	}()
	prog := startProgress(opts.Progress, g.ranks)
	err := g.awaitStartup(ctx, results)
	prog.stop()
	if err != nil {
		_ = g.Stop(context.Background())
		return nil, err
	}
	return g, nil
}

func validate(specs []Spec) error {
	if len(specs) == 0 {
		return errors.New("launch: no engines to start")
	}
	ports := map[int]int{}
	for i, s := range specs {
		if len(s.Argv) == 0 || s.Argv[0] == "" {
			return fmt.Errorf("launch: rank %d has no command line", s.Rank)
		}
		if s.Port <= 0 || s.Port > 65535 {
			return fmt.Errorf("launch: rank %d has port %d", s.Rank, s.Port)
		}
		if j, dup := ports[s.Port]; dup {
			return fmt.Errorf("launch: ranks %d and %d share port %d", specs[j].Rank, s.Rank, s.Port)
		}
		ports[s.Port] = i
		if s.LogPath == "" {
			return fmt.Errorf("launch: rank %d has no log path", s.Rank)
		}
	}
	return nil
}

func (g *Group) newRank(s Spec) (*rank, error) {
	if err := os.MkdirAll(filepath.Dir(s.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("launch: rank %d log: %w", s.Rank, err)
	}
	f, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("launch: rank %d log: %w", s.Rank, err)
	}
	env := engineplan.EngineEnv(append(os.Environ(), s.Env...), s.GPUs)
	log := g.log.With("rank", s.Rank, "port", s.Port)
	if w := s.where(); w != "" {
		log = log.With("device", w)
	}
	return &rank{spec: s, env: env, logf: f, log: log, since: time.Now()}, nil
}

func (g *Group) closeLogs() {
	for _, r := range g.ranks {
		r.logf.Close()
	}
}

// awaitStartup collects one result per rank; the first failure wins.
func (g *Group) awaitStartup(ctx context.Context, results <-chan error) error {
	for range g.ranks {
		select {
		case err := <-results:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("launch: startup canceled: %w", context.Cause(ctx))
		}
	}
	return nil
}

// Stop stops every engine: SIGTERM to each process group, StopGrace, then
// SIGKILL to the group and to any descendant that left it, and blocks until
// none is left. When ctx ends first, the grace is cut short (SIGKILL now) and
// ctx's error is returned after the engines are gone. Idempotent; safe to
// call from several goroutines.
func (g *Group) Stop(ctx context.Context) error {
	g.stopOnce.Do(func() { close(g.stopping) })
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		g.forceOnce.Do(func() { close(g.force) })
		<-g.done
		return fmt.Errorf("launch: stop: grace cut short: %w", ctx.Err())
	}
}

// Done is closed once every engine has stopped (after Stop, or a failed Start).
func (g *Group) Done() <-chan struct{} { return g.done }

// Restarts is how many times rank's engine was restarted after a crash.
// Unknown ranks have 0.
func (g *Group) Restarts(rank int) int {
	if r := g.rank(rank); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.restarts
	}
	return 0
}

// LastCrash is rank's latest crash or failed restart; false when it never
// went down (or the rank is unknown).
func (g *Group) LastCrash(rank int) (Crash, bool) {
	if r := g.rank(rank); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.crash, r.crashed
	}
	return Crash{}, false
}

// State is rank's current state; Stopped for unknown ranks.
func (g *Group) State(rank int) State {
	if r := g.rank(rank); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.state
	}
	return Stopped
}

// PID is the process id (and process group id) of rank's current engine,
// 0 when none runs.
func (g *Group) PID(rank int) int {
	if r := g.rank(rank); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cur != nil && r.cur.alive() {
			return r.cur.pid
		}
	}
	return 0
}

func (g *Group) rank(n int) *rank {
	for _, r := range g.ranks {
		if r.spec.Rank == n {
			return r
		}
	}
	return nil
}

// setState records and announces a state change. Supervisor goroutine only.
func (g *Group) setState(r *rank, s State, reason string) {
	r.mu.Lock()
	r.state, r.since = s, time.Now()
	r.mu.Unlock()
	r.log.Debug("engine state", "state", s.String(), "reason", reason)
	if g.opts.OnState != nil {
		g.opts.OnState(r.spec.Rank, s, reason)
	}
}

// logLines counts the lines of r's log file so far (the newlines), reading
// only what was added since the last count. Supervisor goroutine only.
func (r *rank) logLines() int {
	f, err := os.Open(r.spec.LogPath)
	if err != nil {
		return r.lines
	}
	defer f.Close()
	if _, err := f.Seek(r.counted, io.SeekStart); err != nil {
		return r.lines
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		r.lines += bytes.Count(buf[:n], []byte{'\n'})
		r.counted += int64(n)
		if err != nil {
			return r.lines
		}
	}
}

// snapshot returns what the progress display shows of r.
func (r *rank) snapshot() (State, time.Time, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := ""
	if r.cur != nil {
		last = r.cur.tail.Last()
		if !r.cur.alive() {
			if reason := exitedReason(r.cur); reason != "" {
				last = reason
			}
		}
	}
	return r.state, r.since, last
}
