// Package launch owns the engine processes of a warden run: one vLLM (or
// simulator) process per data-parallel rank, each on its own loopback port,
// with CUDA_VISIBLE_DEVICES set to its GPU group and its output written to
// one log file per rank (directly, not through a pipe, so the log survives a
// killed warden); the log is read back through an enginelog.Tail, which
// keeps its last lines and the lines that state a cause.
//
// Start launches every rank in parallel and waits, per rank, on GET /health
// and on process exit at once, with a live progress display. A rank that
// exits or stays unhealthy during startup stops the others and yields a
// *StartupError that shows the rank's last log lines and names the cause when
// it is a known one. After startup a crashed rank is reported Down (OnState,
// so the proxy routes around it), its log says why, and it is restarted with
// exponential backoff.
//
// Each engine runs in its own process group. Stop sends SIGTERM to every
// group, waits a grace period, sends SIGKILL to the group, and sweeps
// descendants (gopsutil) until none is left. Each engine is started from a
// goroutine locked to its OS thread for the engine's whole life, with
// Pdeathsig=SIGTERM: the signal fires when the thread that forked the child
// exits, and Go retires threads of unlocked goroutines, so an unlocked start
// could kill an engine early. When the warden itself is SIGKILLed, the
// engine leader gets SIGTERM and shuts down its own children (vLLM's API
// server stops its EngineCore; EngineCore also watches for its parent).
//
// What each engine is told (argv, environment, devices) is decided before
// it starts, in package engineplan. An engine in a container (--image) is
// the runtime's CLI in the foreground; container.go adds what a process
// group cannot do: the container's exit cause, its removal, and the
// removal of what a killed warden left (RemoveLeftovers).
package launch
