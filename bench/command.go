package bench

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// Command returns the `warden bench` command.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "run synthetic agent sessions against a URL",
		Action: func(c *cli.Context) error {
			return errors.New("bench: not implemented yet")
		},
	}
}
