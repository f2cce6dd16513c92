// Package command is the warden's command tree: every command, its flags
// with their WARDEN_* environment variables and help, and the mapping of
// flags to the Options and Config structs of the packages that do the work
// (serve, run, sweep, bench, sim, gpu, router/panel, internal/wardenproc).
// It is the one package that imports urfave/cli; the main package only
// calls App.
package command

import (
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/internal/exit"
)

// App is the warden's command tree.
func App(version string) *cli.App {
	return configure(&cli.App{
		Name:    "warden",
		Usage:   "sticky, load-aware data-parallel router for local vLLM",
		Version: version,
		Commands: []*cli.Command{
			serveCommand(),
			routeCommand(),
			eppCommand(),
			gpusCommand(),
			devicesCommand(),
			statusCommand(),
			simCommand(),
			benchCommand(),
			waitCommand(),
			runCommand(),
			sweepCommand(),
		},
	})
}

// Run runs the command args names (args[0] is the program). A command that
// fails with an exit status exits with it; any other error is returned.
func Run(args []string, version string) error { return App(version).Run(args) }

// envVars names a flag's WARDEN_* environment variable.
func envVars(s string) []string { return []string{"WARDEN_" + s} }

// action wraps a command's action: an exit.Error it returns ends the
// program with its status (its message printed unless empty).
func action(f func(c *cli.Context) error) cli.ActionFunc {
	return func(c *cli.Context) error { return cliExit(f(c)) }
}

// cliExit is err as urfave/cli's exit: an exit.Error's status and message.
func cliExit(err error) error {
	if e, ok := exit.As(err); ok {
		return cli.Exit(e.Msg, e.Code)
	}
	return err
}
