package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/proxy/panel"
)

// waitCommand is `warden wait`: for shell scripts and agent farms that start
// `warden serve` in the background and must not send work before it is ready.
func waitCommand() *cli.Command {
	return &cli.Command{
		Name:  "wait",
		Usage: "wait until a warden answers /health with 200, then exit 0",
		Description: "Polls URL/health every half second. Exits 0 as soon as the warden is ready\n" +
			"(all engines loaded and at least one replica healthy), 1 on timeout.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Value: panel.DefaultURL, EnvVars: []string{"WARDEN_URL"},
				Usage: "base URL of the warden to wait for"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: []string{"WARDEN_WAIT_TIMEOUT"},
				Usage: "give up after this long (engines can take minutes to load)"},
		},
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			return waitReady(ctx, strings.TrimRight(c.String("url"), "/"))
		},
	}
}

// waitReady polls base/health until it answers 200 or ctx ends.
func waitReady(ctx context.Context, base string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		if err != nil {
			return cli.Exit(fmt.Sprintf("warden wait: bad --url %q: %v", base, err), 2)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return cli.Exit(fmt.Sprintf("warden wait: %s not ready (%s); last answer: %s", base, ctx.Err(), last), 1)
		case <-tick.C:
		}
	}
}
