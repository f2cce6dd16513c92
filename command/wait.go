package command

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/internal/wardenproc"
	"github.com/lmwarden/warden/router/schema"
)

// waitCommand is `warden wait`: for shell scripts and agent farms that start
// `warden serve` in the background and must not send work before it is ready.
func waitCommand() *cli.Command {
	return &cli.Command{
		Name:  "wait",
		Usage: "wait until a warden answers /health with 200, then exit 0",
		Description: "Polls URL/health every half second. Exits 0 as soon as the warden is ready\n" +
			"(all engines loaded and at least one replica healthy), 1 on timeout. While it waits it\n" +
			"says why on stderr every 5 seconds (the warden's answer, or that none came).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Value: schema.DefaultURL, EnvVars: []string{"WARDEN_URL"},
				Usage: "base URL of the warden to wait for"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: []string{"WARDEN_WAIT_TIMEOUT"},
				Usage: "give up after this long (engines can take minutes to load)"},
		},
		Action: action(func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			base, err := schema.NormalizeURL(c.String("url"))
			if err != nil {
				return cli.Exit("warden wait: "+err.Error(), 2)
			}
			return wardenproc.Wait(ctx, base, c.App.ErrWriter)
		}),
	}
}
