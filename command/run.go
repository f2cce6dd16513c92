package command

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/router/schema"
	"github.com/lmwarden/warden/run"
)

// runFlags are every `warden run <agent>`'s flags.
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "url", Value: schema.DefaultURL, EnvVars: []string{"WARDEN_URL"},
			Usage: "base `URL` of the warden the agent uses, with or without /v1 (the default of status and wait too)"},
		&cli.StringFlag{Name: "api-key", EnvVars: envVars("API_KEY"),
			Usage: "`KEY` the agent sends: the warden's --api-key, which it reads from WARDEN_SERVER_API_KEY " +
				"(default: a dummy, which a warden without --api-key accepts)"},
		&cli.StringFlag{Name: "model", EnvVars: envVars("RUN_MODEL"),
			Usage: "model `NAME` the agent asks for (default: the one the warden serves)"},
		&cli.IntFlag{Name: "max-output-tokens", EnvVars: envVars("RUN_MAX_OUTPUT_TOKENS"),
			Usage: "output cap (`N` tokens) the agent is told (0: min(32000, max_model_len/4); the engines accept up to max_model_len, but an agent keeps its output cap free in the context)"},
		&cli.StringFlag{Name: "agent-bin", EnvVars: envVars("AGENT_BIN"),
			Usage: "the agent's executable, a `PATH` or a name looked up on PATH (default: claude, codex or opencode)"},
		&cli.DurationFlag{Name: "wait", EnvVars: envVars("RUN_WAIT"),
			Usage: "wait up to `DURATION` for the warden to be ready (0: it must be ready now; with --serve: as long as serve starts)"},
		&cli.StringFlag{Name: "serve", EnvVars: envVars("RUN_SERVE"),
			Usage: "start a warden for this run with these warden serve `ARGS` (one string, e.g. \"--model M --dp 2\"; a loopback --host, a free --port and a --log-dir are added when not given); it gets SIGINT when the agent exits"},
		&cli.StringFlag{Name: "serve-log", EnvVars: envVars("RUN_SERVE_LOG"),
			Usage: "with --serve: `FILE` for the warden's own output (default: serve.log in its --log-dir)"},
		&cli.BoolFlag{Name: "dry-run", EnvVars: envVars("RUN_DRY_RUN"),
			Usage: "print the environment and command line the agent would get, as one shell command, and exit"},
	}
}

// runCommand is `warden run`.
func runCommand() *cli.Command {
	var subs []*cli.Command
	for _, a := range run.Agents {
		subs = append(subs, &cli.Command{
			Name:      a.Name,
			Usage:     "run " + a.Title + " against the warden",
			ArgsUsage: "[-- " + a.Bin + " arguments]",
			Description: "Sets: " + a.Sets + "\n\nOptions go before --; everything after -- goes to " + a.Bin +
				" verbatim. Nothing in your config files is changed.",
			Flags: runFlags(),
			Action: action(func(c *cli.Context) error {
				if c.String("serve") != "" {
					if err := processGroups("warden run --serve"); err != nil {
						return err
					}
				}
				return run.Main(c.Context, a, runOptions(c))
			}),
		})
	}
	return &cli.Command{
		Name:  "run",
		Usage: "run a coding agent (claude, codex, opencode) against a warden, told its model and limits",
		UsageText: "warden run claude|codex|opencode [options] [-- agent arguments]\n\n" +
			"   warden run claude -- -p 'fix the failing test'\n" +
			"   warden run codex --url http://gpu-box:8000 -- exec 'add a --verbose flag'\n" +
			"   warden run opencode --serve \"--model Qwen/Qwen3-Coder-30B-A3B-Instruct --dp 2\"",
		Description: "Finds the warden at --url (WARDEN_URL; default " + schema.DefaultURL + "), checks that it is ready, reads the\n" +
			"served model and the engines' max_model_len (GET /warden/status, /v1/models), and runs the agent in the\n" +
			"foreground with the base URL, a key, the model and the limits set through the agent's own environment\n" +
			"variables or command-line overrides; your config files are not touched. It prints to stderr which limits\n" +
			"it told the agent and which it could not. The exit code is the agent's. --serve starts a warden for the run.",
		Subcommands: subs,
	}
}

// runOptions reads a `warden run <agent>`'s flags; the agent inherits this
// process's environment and standard input.
func runOptions(c *cli.Context) run.Options {
	o := run.Options{
		URL: c.String("url"), Key: c.String("api-key"), Model: c.String("model"), AgentBin: c.String("agent-bin"),
		MaxOutput: c.Int("max-output-tokens"), Wait: c.Duration("wait"), Serve: c.String("serve"),
		ServeLog: c.String("serve-log"), DryRun: c.Bool("dry-run"),
		Stdin: os.Stdin, Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Environ: os.Environ(), UserArgs: c.Args().Slice(),
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	// Given as a flag: set, and not only by a WARDEN_URL of the same value.
	env, ok := os.LookupEnv("WARDEN_URL")
	o.URLFlag = c.IsSet("url") && (!ok || o.URL != env)
	return o
}
