package bench

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Options are a bench run's settings as its command line gives them (the
// command layer, command, fills them from the flags and their
// WARDEN_BENCH_* variables): numbers as numbers, lists and shapes as the
// text given. Config parses and checks them.
type Options struct {
	URL, API, Model string
	Seed            int64
	SystemTokens    int
	FirstTokens     int
	TurnTokens      int
	CharsPerToken   float64
	Turns           int
	BillingHeader   bool
	Mix             string
	Load            string
	ToolTime        string
	Subagents       string
	// MixSet, ToolTimeSet and SubagentsSet say that the flag (or its
	// variable) was given: then it overrides what --load sets.
	MixSet, ToolTimeSet, SubagentsSet bool
	MaxTokens                         int
	Stages                            string
	Stage, Warmup, Drain, Poll        time.Duration
	ClientRTT                         time.Duration
	TimeScale                         float64
	TimeScaleSet                      bool // --time-scale given: a target that says another is refused
	AB                                string
	ABSet                             bool // --ab given: against a bare engine, an error rather than one run
	ResetCache, Alternate, Carry      bool
	AdminToken, DecisionLog, Out      string
	Engines                           string // comma-separated engine base URLs (--engines)
	MaxFailed                         float64
	NoProgress, Verbose               bool
}

// DefaultOptions are the flags' defaults: DefaultConfig's load.
func DefaultOptions() Options {
	d := DefaultConfig()
	return Options{API: string(d.API), Seed: d.Seed, SystemTokens: d.Sizes.SystemTokens,
		FirstTokens: d.Sizes.FirstTokens, TurnTokens: d.Sizes.TurnTokens, CharsPerToken: d.Sizes.CharsPerToken,
		Turns: d.Turns, Load: LoadReference, ToolTime: "0", Subagents: "0", MaxTokens: d.MaxTokens,
		Stages: "4,8,16,24,32", Stage: d.Stage, Drain: d.Drain, Poll: d.Poll, TimeScale: d.TimeScale,
		AB: "off,sticky", Carry: d.Carry, MaxFailed: 0.1}
}

// Config parses and checks the options into a Config.
func (o Options) Config() (Config, error) {
	cfg, err := o.read()
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// Target is Config for a command that runs the bench against wardens it
// starts itself (warden sweep): against url, writing to out, with the
// warden's own policy (no switching, no admin token, no decision log) and
// times read at timeScale when it is positive.
func (o Options) Target(url, out string, timeScale float64) (Config, error) {
	cfg, err := o.read()
	if err != nil {
		return cfg, err
	}
	cfg.URL, cfg.Out, cfg.Variants, cfg.DecisionLog, cfg.AdminToken = url, out, nil, "", ""
	if timeScale > 0 {
		cfg.TimeScale, cfg.TimeScaleSet = timeScale, true
	}
	return cfg, cfg.Validate()
}

// read turns the options into a Config, checking what parsing needs;
// Validate checks the rest.
func (o Options) read() (Config, error) {
	cfg := DefaultConfig()
	cfg.URL = o.URL
	cfg.API = API(o.API)
	cfg.Model = o.Model
	cfg.Seed = o.Seed
	cfg.Sizes = Sizes{SystemTokens: o.SystemTokens, FirstTokens: o.FirstTokens,
		TurnTokens: o.TurnTokens, CharsPerToken: o.CharsPerToken}
	cfg.Turns = o.Turns
	if err := cfg.applyLoad(o.Load); err != nil {
		return cfg, err
	}
	if o.MixSet || cfg.Load == "" {
		mix, err := parseMix(o.Mix)
		if err != nil {
			return cfg, err
		}
		cfg.Mix = mix
	}
	if o.ToolTimeSet || cfg.Load == "" {
		tt, err := parseToolTime(o.ToolTime)
		if err != nil {
			return cfg, err
		}
		cfg.ToolTime = tt
	}
	if o.SubagentsSet || cfg.Load == "" {
		sa, err := parseSubagents(o.Subagents)
		if err != nil {
			return cfg, err
		}
		cfg.Subagents = sa
	}
	cfg.MaxTokens = o.MaxTokens
	stages, err := parseInts(o.Stages)
	if err != nil {
		return cfg, fmt.Errorf("--stages: %w", err)
	}
	cfg.Stages = stages
	cfg.Stage, cfg.Warmup, cfg.Drain, cfg.Poll = o.Stage, o.Warmup, o.Drain, o.Poll
	cfg.TimeScale, cfg.TimeScaleSet = o.TimeScale, o.TimeScaleSet
	cfg.RTT = o.ClientRTT
	cfg.Variants = parseVariants(o.AB)
	cfg.ResetCache = o.ResetCache
	cfg.Alternate = o.Alternate
	cfg.Carry = o.Carry
	cfg.AdminToken = o.AdminToken
	cfg.BillingHeader = o.BillingHeader
	cfg.Out = o.Out
	if cfg.Out == "" {
		cfg.Out = filepath.Join("bench-results", time.Now().Format("20060102-150405"))
	}
	cfg.Progress = !o.NoProgress
	cfg.DecisionLog = o.DecisionLog
	for _, e := range strings.Split(o.Engines, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Engines = append(cfg.Engines, strings.TrimRight(e, "/"))
		}
	}
	if f := o.MaxFailed; f <= 0 || f > 1 {
		return cfg, fmt.Errorf("--max-failed must be a share in (0, 1], got %v", f)
	}
	return cfg, nil
}
