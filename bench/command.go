package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

func env(name string) []string { return []string{"WARDEN_BENCH_" + name} }

// flags returns the bench flags with defaults from DefaultConfig.
func flags() []cli.Flag {
	d := DefaultConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "url", Usage: "base URL of a warden or a bare engine (vLLM or the simulator)", EnvVars: env("URL"), Required: true},
		&cli.StringFlag{Name: "api", Value: string(d.API), Usage: "anthropic (Claude Code: /v1/messages, X-Claude-Code-Session-Id + metadata.user_id) or openai (/v1/chat/completions, session-id + prompt_cache_key)", EnvVars: env("API")},
		&cli.StringFlag{Name: "model", Usage: "model name to request (default: the first id of GET /v1/models)", EnvVars: env("MODEL")},
		&cli.Int64Flag{Name: "seed", Value: d.Seed, Usage: "seed of the generated prompts (variants of one run share it)", EnvVars: env("SEED")},
		&cli.IntFlag{Name: "system-tokens", Value: d.Sizes.SystemTokens, Usage: "tokens of the system prompt shared by all sessions", EnvVars: env("SYSTEM_TOKENS")},
		&cli.IntFlag{Name: "first-tokens", Value: d.Sizes.FirstTokens, Usage: "tokens of each session's unique first message", EnvVars: env("FIRST_TOKENS")},
		&cli.IntFlag{Name: "turn-tokens", Value: d.Sizes.TurnTokens, Usage: "new user tokens per follow-up turn", EnvVars: env("TURN_TOKENS")},
		&cli.Float64Flag{Name: "chars-per-token", Value: d.Sizes.CharsPerToken, Usage: "characters of generated text per token; 0 = measure with the target's POST /v1/messages/count_tokens", EnvVars: env("CHARS_PER_TOKEN")},
		&cli.IntFlag{Name: "turns", Value: d.Turns, Usage: "follow-up turns after the first message", EnvVars: env("TURNS")},
		&cli.BoolFlag{Name: "billing-header", Usage: "send Claude Code's per-conversation billing line (x-anthropic-billing-header: cc_version=...) as the first system block, as Claude Code does (anthropic API only)", EnvVars: env("BILLING_HEADER")},
		&cli.StringFlag{Name: "mix", Usage: "mixed session lengths: FIRSTxTURNS shapes taken in turn by the sessions, e.g. 2000x10,7300x5,15000x3 (overrides --first-tokens and --turns)", EnvVars: env("MIX")},
		&cli.StringFlag{Name: "load", Value: LoadReference, Usage: "preset load: reference (the reference measurement's sessions) or agent (--tool-time 3s,30s,2m --mix 2000x10,7300x5,15000x3 --subagents 0.25,2,3; see docs/benchmarks.md); --tool-time, --mix and --subagents given explicitly override it", EnvVars: env("LOAD")},
		&cli.StringFlag{Name: "tool-time", Value: "0", Usage: "pause between a turn's answer and the session's next turn, the agent running its tools (simulated time): MEDIAN,P90[,MAX] of a log-normal, e.g. 3s,30s,2m; one duration = a fixed pause; 0 = none. Nothing is in flight meanwhile. Drawn from --seed per session and turn", EnvVars: env("TOOL_TIME")},
		&cli.StringFlag{Name: "subagents", Value: "0", Usage: "SHARE,N,TURNS: a share of sessions (drawn from --seed) spawns N subagents in parallel after its first turn, like Claude Code's Agent tool: each a conversation of its own (a shared 1.5k-token agent system prompt, a 300-2000-token task, TURNS follow-ups) sent with the parent's session id plus x-claude-code-agent-id (both APIs); the parent waits and sends their final replies as its next turn. --stages counts parents only; 0 = none", EnvVars: env("SUBAGENTS")},
		&cli.IntFlag{Name: "max-tokens", Value: d.MaxTokens, Usage: "max output tokens per turn", EnvVars: env("MAX_TOKENS")},
		&cli.StringFlag{Name: "stages", Value: "4,8,16,24,32", Usage: "concurrent sessions per stage, comma separated", EnvVars: env("STAGES")},
		&cli.DurationFlag{Name: "stage", Value: d.Stage, Usage: "length of each stage (simulated time when --time-scale > 1)", EnvVars: env("STAGE")},
		&cli.DurationFlag{Name: "warmup", Usage: "run each stage's sessions this long before the measured window opens (simulated time; 0 = measure from the synchronized first turns, like the reference)", EnvVars: env("WARMUP")},
		&cli.DurationFlag{Name: "drain", Value: d.Drain, Usage: "how long in-flight turns may finish after a stage before they are canceled (simulated time)", EnvVars: env("DRAIN")},
		&cli.DurationFlag{Name: "poll", Value: d.Poll, Usage: "interval of /warden/status or /metrics polls for replicas busy (simulated time)", EnvVars: env("POLL")},
		&cli.DurationFlag{Name: "client-rtt", Usage: "network round trip of a remote client, added before every turn (simulated time): it counts toward TTFB and turn time and spaces a session's turns at the server; the reference measured over the internet (~250ms)", EnvVars: env("CLIENT_RTT")},
		&cli.Float64Flag{Name: "time-scale", Value: d.TimeScale, Usage: "simulated seconds per wall second; set it to the simulator's --sim-time-scale", EnvVars: env("TIME_SCALE")},
		&cli.StringFlag{Name: "ab", Value: "off,sticky", Usage: "two warden policies A,B to compare, switched with POST /warden/policy; \"none\" = no switching", EnvVars: env("AB")},
		&cli.BoolFlag{Name: "reset-cache", Usage: "reset the engines' prefix caches before every stage run", EnvVars: env("RESET_CACHE")},
		&cli.BoolFlag{Name: "alternate", Usage: "run stage by stage, A,B then B,A, ... instead of all stages of A, then all of B", EnvVars: env("ALTERNATE")},
		&cli.BoolFlag{Name: "carry", Value: d.Carry, Usage: "run each variant's stages back to back as one load: sessions carry over from one stage to the next (new ones are added), so stages after the first measure sessions at mixed turns, as the reference's continuous run did; --carry=false starts every stage's sessions together (lockstep). Ignored with --alternate", EnvVars: env("CARRY")},
		&cli.StringFlag{Name: "admin-token", Usage: "bearer token for POST /warden/policy and /warden/reset_prefix_cache when the warden is not on loopback", EnvVars: env("ADMIN_TOKEN")},
		&cli.StringFlag{Name: "decision-log", Usage: "the warden's --decision-log file (readable here): after the run, join its lines with the turns by X-Request-Id into turns-decisions.csv (route reason, replica, warden queue wait per turn)", EnvVars: env("DECISION_LOG")},
		&cli.StringFlag{Name: "out", Usage: "results folder (default bench-results/<timestamp>)", EnvVars: env("OUT")},
		&cli.Float64Flag{Name: "max-failed", Value: 0.1, Usage: "exit 1 when a stage lost more than this share of its turns to errors (or no turn succeeded at all); results are still written", EnvVars: env("MAX_FAILED")},
		&cli.BoolFlag{Name: "no-progress", Usage: "no progress bars on stderr", EnvVars: env("NO_PROGRESS")},
		&cli.BoolFlag{Name: "verbose", Usage: "debug logging (every failed turn)", EnvVars: env("VERBOSE")},
	}
}

// Command returns the `warden bench` command.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "run closed-loop synthetic agent sessions against a warden or an engine",
		Description: "Stages of concurrent Claude-Code-like sessions (shared system prompt, unique first message,\n" +
			"follow-up turns); per stage the reference table's columns. Against a warden, --ab switches\n" +
			"its policy between two variants. Writes table.md, summary.csv, summary.json, turns.csv and\n" +
			"ttfb.svg to --out (with --decision-log also turns-decisions.csv) and prints the table.",
		Flags:  flags(),
		Action: action,
	}
}

// configFrom reads the flags into a validated Config.
func configFrom(c *cli.Context) (Config, error) {
	cfg, err := readConfig(c)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// LoadFlags are the bench's flags for a command that runs the bench against
// wardens it starts itself (warden sweep): all but the target and its
// switching (--url, --ab, --admin-token), the results folder and the
// decision log, which that command sets.
func LoadFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range flags() {
		switch f.Names()[0] {
		case "url", "ab", "admin-token", "out", "decision-log":
			continue
		}
		out = append(out, f)
	}
	return out
}

// LoadConfig reads LoadFlags into a validated Config for the target url,
// writing to out, with the warden's own policy (no switching) and times
// read at timeScale.
func LoadConfig(c *cli.Context, url, out string, timeScale float64) (Config, error) {
	cfg, err := readConfig(c)
	if err != nil {
		return cfg, err
	}
	cfg.URL, cfg.Out, cfg.Variants, cfg.DecisionLog, cfg.AdminToken = url, out, nil, "", ""
	if timeScale > 0 {
		cfg.TimeScale = timeScale
	}
	return cfg, cfg.Validate()
}

// readConfig reads the flags into a Config, checking what parsing needs;
// Validate checks the rest.
func readConfig(c *cli.Context) (Config, error) {
	cfg := DefaultConfig()
	cfg.URL = c.String("url")
	cfg.API = API(c.String("api"))
	cfg.Model = c.String("model")
	cfg.Seed = c.Int64("seed")
	cfg.Sizes = Sizes{SystemTokens: c.Int("system-tokens"), FirstTokens: c.Int("first-tokens"),
		TurnTokens: c.Int("turn-tokens"), CharsPerToken: c.Float64("chars-per-token")}
	cfg.Turns = c.Int("turns")
	if err := cfg.applyLoad(c.String("load")); err != nil {
		return cfg, err
	}
	if c.IsSet("mix") || cfg.Load == "" {
		mix, err := parseMix(c.String("mix"))
		if err != nil {
			return cfg, err
		}
		cfg.Mix = mix
	}
	if c.IsSet("tool-time") || cfg.Load == "" {
		tt, err := parseToolTime(c.String("tool-time"))
		if err != nil {
			return cfg, err
		}
		cfg.ToolTime = tt
	}
	if c.IsSet("subagents") || cfg.Load == "" {
		sa, err := parseSubagents(c.String("subagents"))
		if err != nil {
			return cfg, err
		}
		cfg.Subagents = sa
	}
	cfg.MaxTokens = c.Int("max-tokens")
	stages, err := parseInts(c.String("stages"))
	if err != nil {
		return cfg, fmt.Errorf("--stages: %w", err)
	}
	cfg.Stages = stages
	cfg.Stage, cfg.Warmup, cfg.Drain, cfg.Poll = c.Duration("stage"), c.Duration("warmup"), c.Duration("drain"), c.Duration("poll")
	cfg.TimeScale = c.Float64("time-scale")
	cfg.RTT = c.Duration("client-rtt")
	cfg.Variants = parseVariants(c.String("ab"))
	cfg.ResetCache = c.Bool("reset-cache")
	cfg.Alternate = c.Bool("alternate")
	cfg.Carry = c.Bool("carry")
	cfg.AdminToken = c.String("admin-token")
	cfg.BillingHeader = c.Bool("billing-header")
	cfg.Out = c.String("out")
	if cfg.Out == "" {
		cfg.Out = filepath.Join("bench-results", time.Now().Format("20060102-150405"))
	}
	cfg.Progress = !c.Bool("no-progress")
	cfg.DecisionLog = c.String("decision-log")
	if f := c.Float64("max-failed"); f <= 0 || f > 1 {
		return cfg, fmt.Errorf("--max-failed must be a share in (0, 1], got %v", f)
	}
	return cfg, nil
}

func action(c *cli.Context) error {
	cfg, err := configFrom(c)
	if err != nil {
		return cli.Exit(err, 2)
	}
	level := slog.LevelInfo
	if c.Bool("verbose") {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &Runner{Cfg: cfg, Log: log, Stderr: c.App.ErrWriter}
	res, runErr := r.Run(ctx, c.IsSet("ab"))
	if res == nil {
		return runErr
	}
	if err := WriteAll(cfg.Out, res); err != nil {
		return errors.Join(runErr, fmt.Errorf("writing results: %w", err))
	}
	if cfg.DecisionLog != "" {
		if n, err := JoinDecisions(cfg.Out, cfg.DecisionLog, res, 3*time.Second); err != nil {
			log.Error("the decision log was not joined", "path", cfg.DecisionLog, "err", err)
		} else {
			log.Info("decision log joined", "file", FileTurnDecisions, "turns", len(res.Turns), "logged", n)
		}
	}
	fmt.Fprint(c.App.Writer, Markdown(res))
	for _, s := range res.Stages {
		if s.Errors > 0 {
			log.Warn("turns failed", "variant", s.Variant, "sessions", s.Sessions, "errors", s.Errors)
		}
	}
	log.Info("results written", "dir", cfg.Out)
	if errors.Is(runErr, context.Canceled) {
		return cli.Exit("bench interrupted; partial results written to "+cfg.Out, 130)
	}
	if runErr != nil {
		return runErr
	}
	if err := res.Failed(c.Float64("max-failed")); err != nil {
		return cli.Exit("warden bench: "+err.Error()+" (results in "+cfg.Out+")", 1)
	}
	return nil
}
