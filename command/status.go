package command

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/schema"
)

// statusCommand is `warden status [--url URL] [--watch [interval]] [--json]`:
// the routing panel of a running warden as a terminal table.
func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show the routing panel of a running warden (replicas, stickiness, cache hits)",
		ArgsUsage: "[interval]   (with --watch: redraw period, e.g. 5s)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Value: schema.DefaultURL, EnvVars: []string{"WARDEN_URL"},
				Usage: "base `URL` of the warden (its public port; a base URL ending in /v1, as agents take it, too)"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, EnvVars: []string{"WARDEN_STATUS_WATCH"},
				Usage: "redraw every interval until interrupted (in place on a terminal)"},
			&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, EnvVars: []string{"WARDEN_STATUS_INTERVAL"},
				Usage: "redraw period for --watch (a positional interval overrides it)"},
			&cli.BoolFlag{Name: "json", EnvVars: []string{"WARDEN_STATUS_JSON"},
				Usage: "print the raw status JSON instead of the table"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, EnvVars: []string{"WARDEN_STATUS_TIMEOUT"},
				Usage: "how long to wait for the warden's answer"},
		},
		Action: action(func(c *cli.Context) error {
			interval := c.Duration("interval")
			if c.NArg() > 1 {
				return cli.Exit(fmt.Sprintf("status: one interval at most, got %q", c.Args().Slice()), 2)
			}
			if arg := c.Args().First(); arg != "" {
				var err error
				if interval, err = time.ParseDuration(arg); err != nil {
					return cli.Exit(fmt.Sprintf("status: interval %q: want a duration such as 2s or 500ms", arg), 2)
				}
			}
			return panel.ShowStatus(c.Context, panel.StatusOptions{URL: c.String("url"), Watch: c.Bool("watch"),
				Interval: interval, JSON: c.Bool("json"), Timeout: c.Duration("timeout"), Out: c.App.Writer})
		}),
	}
}
