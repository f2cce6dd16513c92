package command

import (
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/gpu"
)

// gpusCommand is `warden gpus`: the GPUs NVML (or nvidia-smi) reports,
// with memory and the processes on each, as a table or --json.
func gpusCommand() *cli.Command {
	return &cli.Command{
		Name:  "gpus",
		Usage: "list NVIDIA GPUs (index, name, memory, processes) as warden sees them",
		Flags: []cli.Flag{
			&cli.BoolFlag{
				Name:    "json",
				Usage:   "print the GPUs as a JSON array instead of a table ([] when there are none)",
				EnvVars: []string{"WARDEN_GPUS_JSON"},
			},
		},
		Action: func(c *cli.Context) error {
			devs, err := gpu.Discover(c.Context)
			if err != nil {
				if c.Bool("json") { // still a JSON answer on stdout: no GPUs
					if werr := gpu.WriteJSON(c.App.Writer, nil); werr != nil {
						return werr
					}
				}
				return cli.Exit("warden gpus: "+err.Error(), 1)
			}
			if c.Bool("json") {
				return gpu.WriteJSON(c.App.Writer, devs)
			}
			gpu.WriteTable(c.App.Writer, devs)
			return nil
		},
	}
}
