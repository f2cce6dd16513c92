package command

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/sim"
)

// simCommand is the `warden sim` command tree: `serve` (the vLLM stand-in;
// its argv is parsed by hand, see sim.ParseArgs) and the hidden `child`
// used by --sim-fork-child.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "run the built-in vLLM simulator",
		Subcommands: []*cli.Command{{
			Name:            "serve",
			Usage:           "serve MODEL like `vllm serve` on the simulator",
			ArgsUsage:       "MODEL [vLLM serve flags] [sim flags]",
			Description:     "Flags (each also --flag=value; unknown vLLM flags are accepted and logged):\n" + sim.FlagHelp(),
			SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				for _, a := range c.Args().Slice() {
					if a == "--help" || a == "-h" {
						return cli.ShowSubcommandHelp(c)
					}
				}
				ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				if err := sim.Main(ctx, c.Args().Slice(), os.Stdout, os.Stderr); err != nil {
					return cli.Exit(fmt.Sprintf("sim: %v", err), 1)
				}
				return nil
			},
		}, {
			Name:   "child",
			Usage:  "sleep until killed (stands in for vLLM's EngineCore)",
			Hidden: true,
			Action: func(c *cli.Context) error {
				ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				return sim.ChildMain(ctx)
			},
		}},
	}
}
