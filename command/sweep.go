package command

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/sweep"
)

// sweepCommand is `warden sweep`.
func sweepCommand() *cli.Command {
	flags := append([]cli.Flag{
		&cli.StringFlag{Name: "layouts", Value: "4x1,2x2,1x4", EnvVars: envVars("SWEEP_LAYOUTS"),
			Usage: "layouts to compare, DPxTP comma separated (dp replicas of tp cards each)"},
		&cli.StringFlag{Name: "out", EnvVars: envVars("SWEEP_OUT"),
			Usage: "results folder (default bench-results/sweep-<time>): sweep.md, sweep.csv, sweep.json, sweep.svg, and per layout its bench results and logs"},
		&cli.DurationFlag{Name: "ready-timeout", Value: 30 * time.Minute, EnvVars: envVars("SWEEP_READY_TIMEOUT"),
			Usage: "longest a layout may take to get ready before it is skipped"},
	}, benchLoadFlags()...)
	return &cli.Command{
		Name:      "sweep",
		Usage:     "compare dp x tp layouts of the same cards: serve each, run the same bench, one table",
		ArgsUsage: "[flags] -- SERVE-FLAGS [-- ENGINE-ARGS]",
		Description: "For each layout in --layouts, starts `warden serve SERVE-FLAGS --dp D --tp T` on a free\n" +
			"loopback port (the same launch code as serve), waits until it is ready, runs the bench\n" +
			"(the bench flags below, one policy: the warden's), stops it, and writes one side-by-side table\n" +
			"per layout and stage: output tok/min, TTFB p50/p95, prefix hit %, KV capacity, and the\n" +
			"sessions whose working set fits; a verdict per stage says which layout wins what.\n" +
			"A layout that cannot start is reported with serve's reason and skipped.\n\n" +
			"Example (the reference rig on the simulator, 4 cards):\n" +
			"  warden sweep --layouts 4x1,2x2,1x4 --stages 4,8,16,24,32 --warmup 3m -- \\\n" +
			"    --model Qwen/Qwen3-4B-Instruct-2507 --engine sim --max-num-seqs 32 -- --sim-time-scale 10",
		Flags: flags,
		Action: action(func(c *cli.Context) error {
			if err := processGroups("warden sweep"); err != nil {
				return err
			}
			return sweep.Main(c.Context, sweep.Options{Layouts: c.String("layouts"), Args: c.Args().Slice(), Out: c.String("out"),
				ReadyTimeout: c.Duration("ready-timeout"), Bench: benchOptions(c), TimeScaleSet: c.IsSet("time-scale"),
				Stdout: c.App.Writer, Stderr: c.App.ErrWriter})
		}),
	}
}
