// Command warden runs local LLM engines (vLLM) for coding agents: one engine
// per data-parallel rank, and in front of them a sticky, load-aware proxy that
// keeps each conversation on the replica whose prefix cache holds it.
//
// main.go owns the command tree; serve.go wires GPUs, engines and the proxy
// for `warden serve` and owns its shutdown order; route.go does the same for
// `warden route` over servers that already run; flags.go holds what the two
// share (router flags, HTTP server, logger, registry, drain); wait.go is
// `warden wait`. The other commands live with their packages (gpu, sim,
// bench, proxy/panel).
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/gpu"
	"github.com/lmwarden/warden/internal/command"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/proxy/panel"
	"github.com/lmwarden/warden/sim"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	app := &cli.App{
		Name:    "warden",
		Usage:   "sticky, load-aware data-parallel router for local vLLM",
		Version: version,
		Commands: []*cli.Command{
			serveCommand(),
			routeCommand(),
			gpu.Command(),
			devicesCommand(),
			panel.StatusCommand(),
			sim.Command(),
			command.BenchCommand(),
			waitCommand(),
			command.RunCommand(),
			command.SweepCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "warden:", err)
		os.Exit(1)
	}
}

// cliExit is err as urfave/cli's exit: an exit.Error's status and message.
func cliExit(err error) error {
	if e, ok := exit.As(err); ok {
		return cli.Exit(e.Msg, e.Code)
	}
	return err
}
