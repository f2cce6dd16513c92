package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config is one bench run. Durations are in simulated time: the wall-clock
// duration of a stage is Stage / TimeScale, and every time or rate in the
// results is converted back to simulated seconds.
type Config struct {
	URL       string
	API       API
	Model     string // "" = first id of GET /v1/models
	Seed      int64
	Sizes     Sizes
	Turns     int     // follow-up turns after the first message
	Mix       []Shape // --mix: session k takes Mix[k%len] (first tokens, turns) instead of Sizes.FirstTokens, Turns
	MaxTokens int     // max output tokens per turn
	Stages    []int
	Stage     time.Duration // per stage, simulated
	Warmup    time.Duration // per stage before the measured window, simulated (0 = measure from the first turn)
	Drain     time.Duration // bound on waiting for in-flight turns after a stage, simulated
	Poll      time.Duration // status/metrics poll interval, simulated
	RTT       time.Duration // client network round trip added before every turn, simulated (0 = none)
	TimeScale float64       // simulated seconds per wall second (>= 1 for the sim's --sim-time-scale)
	// TimeScaleSet says TimeScale was given (--time-scale): the bench then
	// refuses a target that says another; otherwise it takes the target's.
	TimeScaleSet bool
	// TimeScaleSource is where TimeScale came from, set by the run.
	TimeScaleSource string
	// Variants are the warden policies to compare (--ab); empty = run the
	// stages once against whatever the target does now.
	Variants   []string
	ResetCache bool // reset the engines' prefix caches before every stage run (with Carry: before every variant)
	Alternate  bool // stage-major order, alternating the variant order per stage
	// Carry runs each variant's stages back to back as one load: sessions
	// carry over from one stage to the next (runSeries). Ignored with
	// Alternate, whose stage runs are each a fresh start.
	Carry      bool
	AdminToken string // bearer token for the warden's admin endpoints ("" = none; loopback needs none)
	// BillingHeader makes Anthropic sessions send Claude Code's
	// per-conversation billing line as their first system block.
	BillingHeader bool
	// Load names the preset the run started from (--load; "" = the
	// reference load); ToolTime, Mix and Subagents hold what it set.
	Load string
	// ToolTime is the pause between a turn's answer and the session's (or
	// subagent's) next turn, simulated; zero = none, as the reference.
	ToolTime ToolTime
	// Subagents makes a share of sessions spawn subagents after their
	// first turn; zero = none. Concurrency counts parents only: a
	// session's subagents run in addition to its slot.
	Subagents Subagents
	Out       string
	Progress  bool
	// DecisionLog is the warden's --decision-log file, read back after the
	// run and joined with the turns into turns-decisions.csv ("" = none).
	DecisionLog string
	// Engines are the engines' base URLs whose /metrics the bench reads
	// for the prefix-hit and replicas-busy columns instead of the target's
	// (--engines): behind a gateway the target's /metrics reaches one
	// engine at random. Empty = the target's own.
	Engines []string
}

// FallbackCharsPerToken is used when --chars-per-token is 0 (measure) and
// the target cannot count tokens.
const FallbackCharsPerToken = 4.0

// DefaultConfig returns the reference measurement's load (docs/reference-rig.md).
func DefaultConfig() Config {
	return Config{
		API:       APIAnthropic,
		Seed:      1,
		Sizes:     Sizes{SystemTokens: 3500, FirstTokens: 7300, TurnTokens: 400, CharsPerToken: 0},
		Turns:     5,
		MaxTokens: 256,
		Stages:    []int{4, 8, 16, 24, 32},
		Stage:     3 * time.Minute,
		Drain:     3 * time.Minute,
		Poll:      time.Second,
		TimeScale: 1,
		Variants:  []string{"off", "sticky"},
		Carry:     true,
		Progress:  true,
	}
}

// Validate reports the first problem with c, as a message naming the flag.
func (c *Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.URL == "" || !(strings.HasPrefix(c.URL, "http://") || strings.HasPrefix(c.URL, "https://")),
		"--url must be an http:// or https:// URL, got %q", c.URL)
	check(c.API != APIAnthropic && c.API != APIOpenAI, "--api must be anthropic or openai, got %q", c.API)
	check(c.Sizes.SystemTokens < 0 || c.Sizes.FirstTokens < 1 || c.Sizes.TurnTokens < 1,
		"token sizes must be positive (system may be 0)")
	check(c.Sizes.CharsPerToken < 0 || c.Sizes.CharsPerToken > 100, "--chars-per-token must be in [0, 100] (0 = measure)")
	check(c.Turns < 0, "--turns must be >= 0")
	check(c.MaxTokens < 1, "--max-tokens must be >= 1")
	check(len(c.Stages) == 0, "--stages must name at least one concurrency")
	seen := map[int]bool{}
	for _, n := range c.Stages {
		check(n < 1 || n > 4096, "--stages: each concurrency must be in 1..4096, got %d", n)
		check(seen[n], "--stages: %d is listed twice", n)
		seen[n] = true
	}
	check(c.Stage <= 0, "--stage must be > 0")
	check(c.Drain < 0, "--drain must be >= 0")
	check(c.Warmup < 0, "--warmup must be >= 0")
	check(c.Poll <= 0, "--poll must be > 0")
	check(c.RTT < 0 || c.RTT > time.Minute, "--client-rtt must be in [0, 1m]")
	check(c.TimeScale < 1, "--time-scale must be >= 1")
	if err := c.ToolTime.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Subagents.validate(); err != nil {
		errs = append(errs, err)
	}
	for _, e := range c.Engines {
		check(!(strings.HasPrefix(e, "http://") || strings.HasPrefix(e, "https://")) || strings.ContainsAny(e, " \t"),
			"--engines: each engine must be an http:// or https:// base URL, got %q", e)
	}
	check(len(c.Variants) == 1 || len(c.Variants) > 2, "--ab takes two policies A,B (or none), got %d", len(c.Variants))
	return errors.Join(errs...)
}

// carry reports whether stages run as one continuous load per variant.
func (c *Config) carry() bool { return c.Carry && !c.Alternate }

// wall converts a simulated duration to wall-clock time.
func (c *Config) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.TimeScale)
}

// parseInts parses "4,8,16".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseVariants parses "off,sticky"; "" and "none" mean no A/B.
func parseVariants(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(f))
	}
	return out
}
