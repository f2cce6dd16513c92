package sim

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// Command returns the `warden sim` command tree.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "run the built-in vLLM simulator",
		Subcommands: []*cli.Command{{
			Name:            "serve",
			Usage:           "serve MODEL like `vllm serve` on the simulator",
			SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				return errors.New("sim: not implemented yet")
			},
		}},
	}
}
