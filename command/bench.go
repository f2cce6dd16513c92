package command

import (
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/bench"
)

func benchEnv(name string) []string { return []string{"WARDEN_BENCH_" + name} }

// benchFlags are the bench's flags with defaults from bench.DefaultOptions.
func benchFlags() []cli.Flag {
	d := bench.DefaultOptions()
	return []cli.Flag{
		&cli.StringFlag{Name: "url", Usage: "base URL of a warden or a bare engine (vLLM or the simulator)", EnvVars: benchEnv("URL"), Required: true},
		&cli.StringFlag{Name: "api", Value: d.API, Usage: "anthropic (Claude Code: /v1/messages, X-Claude-Code-Session-Id + metadata.user_id) or openai (/v1/chat/completions, session-id + prompt_cache_key)", EnvVars: benchEnv("API")},
		&cli.StringFlag{Name: "model", Usage: "model name to request (default: the first id of GET /v1/models)", EnvVars: benchEnv("MODEL")},
		&cli.Int64Flag{Name: "seed", Value: d.Seed, Usage: "seed of the generated prompts (variants of one run share it)", EnvVars: benchEnv("SEED")},
		&cli.IntFlag{Name: "system-tokens", Value: d.SystemTokens, Usage: "tokens of the system prompt shared by all sessions", EnvVars: benchEnv("SYSTEM_TOKENS")},
		&cli.IntFlag{Name: "first-tokens", Value: d.FirstTokens, Usage: "tokens of each session's unique first message", EnvVars: benchEnv("FIRST_TOKENS")},
		&cli.IntFlag{Name: "turn-tokens", Value: d.TurnTokens, Usage: "new user tokens per follow-up turn", EnvVars: benchEnv("TURN_TOKENS")},
		&cli.Float64Flag{Name: "chars-per-token", Value: d.CharsPerToken, Usage: "characters of generated text per token; 0 = measure with the target's POST /v1/messages/count_tokens", EnvVars: benchEnv("CHARS_PER_TOKEN")},
		&cli.IntFlag{Name: "turns", Value: d.Turns, Usage: "follow-up turns after the first message", EnvVars: benchEnv("TURNS")},
		&cli.BoolFlag{Name: "billing-header", Usage: "send Claude Code's per-conversation billing line (x-anthropic-billing-header: cc_version=...) as the first system block, as Claude Code does (anthropic API only)", EnvVars: benchEnv("BILLING_HEADER")},
		&cli.StringFlag{Name: "mix", Usage: "mixed session lengths: FIRSTxTURNS shapes taken in turn by the sessions, e.g. 2000x10,7300x5,15000x3 (overrides --first-tokens and --turns)", EnvVars: benchEnv("MIX")},
		&cli.StringFlag{Name: "load", Value: d.Load, Usage: "preset load: reference (the reference measurement's sessions) or agent (--tool-time 3s,30s,2m --mix 2000x10,7300x5,15000x3 --subagents 0.25,2,3; see docs/benchmarks.md); --tool-time, --mix and --subagents given explicitly override it", EnvVars: benchEnv("LOAD")},
		&cli.StringFlag{Name: "tool-time", Value: d.ToolTime, Usage: "pause between a turn's answer and the session's next turn, the agent running its tools (simulated time): MEDIAN,P90[,MAX] of a log-normal, e.g. 3s,30s,2m; one duration = a fixed pause; 0 = none. Nothing is in flight meanwhile. Drawn from --seed per session and turn", EnvVars: benchEnv("TOOL_TIME")},
		&cli.StringFlag{Name: "subagents", Value: d.Subagents, Usage: "SHARE,N,TURNS: a share of sessions (drawn from --seed) spawns N subagents in parallel after its first turn, like Claude Code's Agent tool: each a conversation of its own (a shared 1.5k-token agent system prompt, a 300-2000-token task, TURNS follow-ups) sent with the parent's session id plus x-claude-code-agent-id (both APIs); the parent waits and sends their final replies as its next turn. --stages counts parents only; 0 = none", EnvVars: benchEnv("SUBAGENTS")},
		&cli.IntFlag{Name: "max-tokens", Value: d.MaxTokens, Usage: "max output tokens per turn", EnvVars: benchEnv("MAX_TOKENS")},
		&cli.StringFlag{Name: "stages", Value: d.Stages, Usage: "concurrent sessions per stage, comma separated", EnvVars: benchEnv("STAGES")},
		&cli.DurationFlag{Name: "stage", Value: d.Stage, Usage: "length of each stage (simulated time when --time-scale > 1)", EnvVars: benchEnv("STAGE")},
		&cli.DurationFlag{Name: "warmup", Usage: "run each stage's sessions this long before the measured window opens (simulated time; 0 = measure from the synchronized first turns, like the reference)", EnvVars: benchEnv("WARMUP")},
		&cli.DurationFlag{Name: "drain", Value: d.Drain, Usage: "how long in-flight turns may finish after a stage before they are canceled (simulated time)", EnvVars: benchEnv("DRAIN")},
		&cli.DurationFlag{Name: "poll", Value: d.Poll, Usage: "interval of /warden/status or /metrics polls for replicas busy (simulated time)", EnvVars: benchEnv("POLL")},
		&cli.DurationFlag{Name: "client-rtt", Usage: "network round trip of a remote client, added before every turn (simulated time): it counts toward TTFB and turn time and spaces a session's turns at the server; the reference measured over the internet (~250ms)", EnvVars: benchEnv("CLIENT_RTT")},
		&cli.Float64Flag{Name: "time-scale", Value: d.TimeScale, DefaultText: "the target's, else 1", Usage: "simulated seconds per wall second; unset, the bench reads the target's (the warden's status, the simulator's warden_sim_time_scale gauge); a value the target contradicts is refused", EnvVars: benchEnv("TIME_SCALE")},
		&cli.StringFlag{Name: "ab", Value: d.AB, Usage: "two warden policies A,B to compare, switched with POST /warden/policy; \"none\" = no switching", EnvVars: benchEnv("AB")},
		&cli.BoolFlag{Name: "reset-cache", Usage: "reset the engines' prefix caches before every stage run", EnvVars: benchEnv("RESET_CACHE")},
		&cli.BoolFlag{Name: "alternate", Usage: "run stage by stage, A,B then B,A, ... instead of all stages of A, then all of B", EnvVars: benchEnv("ALTERNATE")},
		&cli.BoolFlag{Name: "carry", Value: d.Carry, Usage: "run each variant's stages back to back as one load: sessions carry over from one stage to the next (new ones are added), so stages after the first measure sessions at mixed turns, as the reference's continuous run did; --carry=false starts every stage's sessions together (lockstep). Ignored with --alternate", EnvVars: benchEnv("CARRY")},
		&cli.StringFlag{Name: "engines", Usage: "engines' base URLs, comma separated: read the prefix-hit and replicas-busy columns from their /metrics (summed) instead of the target's, for a target that is a gateway in front of them (its /metrics reaches one engine); --reset-cache then resets each", EnvVars: benchEnv("ENGINES")},
		&cli.StringFlag{Name: "admin-token", Usage: "bearer token for POST /warden/policy and /warden/reset_prefix_cache when the warden is not on loopback", EnvVars: benchEnv("ADMIN_TOKEN")},
		&cli.StringFlag{Name: "decision-log", Usage: "the warden's --decision-log file (readable here): after the run, join its lines with the turns by X-Request-Id into turns-decisions.csv (route reason, replica, warden queue wait per turn)", EnvVars: benchEnv("DECISION_LOG")},
		&cli.StringFlag{Name: "out", Usage: "results folder (default bench-results/<timestamp>)", EnvVars: benchEnv("OUT")},
		&cli.Float64Flag{Name: "max-failed", Value: d.MaxFailed, Usage: "exit 1 when a stage lost more than this share of its turns to errors (or no turn succeeded at all); results are still written", EnvVars: benchEnv("MAX_FAILED")},
		&cli.BoolFlag{Name: "no-progress", Usage: "no progress bars on stderr", EnvVars: benchEnv("NO_PROGRESS")},
		&cli.BoolFlag{Name: "verbose", Usage: "debug logging (every failed turn)", EnvVars: benchEnv("VERBOSE")},
	}
}

// benchCommand is `warden bench`.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "run closed-loop synthetic agent sessions against a warden or an engine",
		Description: "Stages of concurrent Claude-Code-like sessions (shared system prompt, unique first message,\n" +
			"follow-up turns); per stage the reference table's columns. Against a warden, --ab switches\n" +
			"its policy between two variants. Writes table.md, summary.csv, summary.json, turns.csv and\n" +
			"ttfb.svg to --out (with --decision-log also turns-decisions.csv) and prints the table.",
		Flags: benchFlags(),
		Action: action(func(c *cli.Context) error {
			return bench.Main(c.Context, benchOptions(c), c.App.Writer, c.App.ErrWriter)
		}),
	}
}

// benchLoadFlags are the bench's flags for a command that runs the bench
// against wardens it starts itself (warden sweep): all but the target and
// its switching (--url, --ab, --admin-token), the results folder and the
// decision log, which that command sets.
func benchLoadFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range benchFlags() {
		switch f.Names()[0] {
		case "url", "ab", "admin-token", "out", "decision-log", "engines":
			continue
		}
		out = append(out, f)
	}
	return out
}

// benchOptions reads the bench's flags (those a command has) into Options.
func benchOptions(c *cli.Context) bench.Options {
	return bench.Options{
		URL: c.String("url"), API: c.String("api"), Model: c.String("model"), Seed: c.Int64("seed"),
		SystemTokens: c.Int("system-tokens"), FirstTokens: c.Int("first-tokens"), TurnTokens: c.Int("turn-tokens"),
		CharsPerToken: c.Float64("chars-per-token"), Turns: c.Int("turns"), BillingHeader: c.Bool("billing-header"),
		Mix: c.String("mix"), Load: c.String("load"), ToolTime: c.String("tool-time"), Subagents: c.String("subagents"),
		MixSet: c.IsSet("mix"), ToolTimeSet: c.IsSet("tool-time"), SubagentsSet: c.IsSet("subagents"),
		MaxTokens: c.Int("max-tokens"), Stages: c.String("stages"),
		Stage: c.Duration("stage"), Warmup: c.Duration("warmup"), Drain: c.Duration("drain"), Poll: c.Duration("poll"),
		ClientRTT: c.Duration("client-rtt"), TimeScale: c.Float64("time-scale"), TimeScaleSet: c.IsSet("time-scale"), AB: c.String("ab"), ABSet: c.IsSet("ab"),
		ResetCache: c.Bool("reset-cache"), Alternate: c.Bool("alternate"), Carry: c.Bool("carry"),
		AdminToken: c.String("admin-token"), Engines: c.String("engines"), DecisionLog: c.String("decision-log"), Out: c.String("out"),
		MaxFailed: c.Float64("max-failed"), NoProgress: c.Bool("no-progress"), Verbose: c.Bool("verbose"),
	}
}
