package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/lmwarden/warden/internal/exit"
)

// step is one stage run of one variant.
type step struct {
	Sessions int
	Variant  string // "" = leave the target's policy alone
}

// plan orders the stage runs. Default (the reference's order): every stage
// with variant A, then every stage with B. alternate: stage-major, A,B at
// the first stage, B,A at the second, and so on.
func plan(stages []int, variants []string, alternate bool) []step {
	if len(variants) == 0 {
		variants = []string{""}
	}
	var out []step
	if !alternate {
		for _, v := range variants {
			for _, n := range stages {
				out = append(out, step{n, v})
			}
		}
		return out
	}
	for i, n := range stages {
		for j := range variants {
			v := variants[j]
			if i%2 == 1 {
				v = variants[len(variants)-1-j]
			}
			out = append(out, step{n, v})
		}
	}
	return out
}

// Results is everything one bench run measured.
type Results struct {
	StartedAt time.Time      `json:"started_at"`
	URL       string         `json:"url"`
	Target    string         `json:"target"` // "warden" or "engine"
	Model     string         `json:"model"`
	API       API            `json:"api"`
	Variants  []string       `json:"variants,omitempty"`
	Config    configJSON     `json:"config"`
	Stages    []StageSummary `json:"stages"`
	Turns     []TurnRecord   `json:"-"` // written as turns.csv
}

// configJSON records the run's settings in the results.
type configJSON struct {
	Seed          int64   `json:"seed"`
	SystemTokens  int     `json:"system_tokens"`
	FirstTokens   int     `json:"first_tokens"`
	TurnTokens    int     `json:"turn_tokens"`
	CharsPerToken float64 `json:"chars_per_token"`
	Turns         int     `json:"turns"`
	MaxTokens     int     `json:"max_tokens"`
	Stages        []int   `json:"stages"`
	StageSeconds  float64 `json:"stage_seconds"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	DrainSeconds  float64 `json:"drain_seconds"`
	TimeScale     float64 `json:"time_scale"`
	// TimeScaleSource says where the time scale came from: the target (its
	// status field or its engines' gauge) or --time-scale.
	TimeScaleSource string  `json:"time_scale_source,omitempty"`
	ResetCache      bool    `json:"reset_cache"`
	Alternate       bool    `json:"alternate"`
	Carry           bool    `json:"carry"`
	ClientRTT       float64 `json:"client_rtt_s"`
	// The agent-like load's settings; absent for the reference load.
	Load      string `json:"load,omitempty"`
	Mix       string `json:"mix,omitempty"`       // FIRSTxTURNS,...
	ToolTime  string `json:"tool_time,omitempty"` // MEDIAN,P90[,MAX], simulated
	Subagents string `json:"subagents,omitempty"` // SHARE,N,TURNS
	// AgentSystemTokens and the task range are the subagents' sizes.
	AgentSystemTokens int   `json:"agent_system_tokens,omitempty"`
	AgentTaskTokens   []int `json:"agent_task_tokens,omitempty"` // [min, max]
	// Engines are the engines read for the prefix hits and replicas busy
	// (--engines); absent when the target's own counters were read.
	Engines []string `json:"engines,omitempty"`
}

// Runner drives a whole bench: probe, A/B policy switches, stages.
type Runner struct {
	Cfg    Config
	HC     *http.Client // nil = a client with enough idle connections
	Log    *slog.Logger
	Stderr io.Writer // progress bars; nil = none

	all *overall // the run's advance over its stage runs, for the bars
}

// newHTTPClient returns one client for all sessions, keeping connections
// alive as agents' clients do: an idle connection for every request that can
// be in flight at once (maxConns) and the bench's own polls, so a session's
// next turn reuses one instead of dialling (with every stream read to its
// end, readStream). No overall timeout: turns can queue for minutes under
// overload; stage contexts bound them instead. Idle connections are kept
// 90 s (Go's and Rust's reqwest's default), longer than a tool pause's
// median; a server that closes them sooner (vLLM's uvicorn after 5 s) makes
// the transport dial again, as it does for an agent.
func newHTTPClient(maxConns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = maxConns + 16
	tr.MaxIdleConnsPerHost = maxConns + 16
	tr.IdleConnTimeout = 90 * time.Second
	tr.DisableCompression = true
	tr.Proxy = nil // load goes straight to the target, never via $HTTP_PROXY
	return &http.Client{Transport: tr}
}

// maxInFlight is the most turns the run can have in flight at once: the
// largest stage's sessions, each with its subagents.
func (c *Config) maxInFlight() int {
	n := maxInt(c.Stages)
	if c.Subagents.enabled() {
		n *= 1 + c.Subagents.N
	}
	return n
}

// Run executes every planned stage and returns the results (partial ones
// with the error when a stage could not be prepared or ctx ends). Against a
// bare engine an A/B plan is an error when abExplicit (the user gave --ab);
// otherwise the default A/B is dropped with a notice and the stages run once.
func (r *Runner) Run(ctx context.Context, abExplicit bool) (*Results, error) {
	cfg := r.Cfg
	if r.HC == nil {
		r.HC = newHTTPClient(cfg.maxInFlight())
	}
	t, err := Probe(ctx, r.HC, cfg.URL)
	if err != nil {
		return nil, err
	}
	t.AdminToken = cfg.AdminToken
	t.Engines = cfg.Engines
	if len(cfg.Engines) > 0 {
		if _, err := t.Sample(ctx); err != nil {
			return nil, fmt.Errorf("--engines: %w", err)
		}
	}
	if err := r.learnTimeScale(ctx, t, &cfg); err != nil {
		return nil, err
	}
	if !t.Warden && len(cfg.Variants) > 0 {
		if abExplicit {
			return nil, fmt.Errorf("--ab %v needs a warden, but %s is a bare engine", cfg.Variants, t.URL)
		}
		r.Log.Info("target is a bare engine: no A/B, one run", "url", t.URL)
		cfg.Variants = nil
	}
	if cfg.Model == "" {
		if cfg.Model, err = t.Model(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.Sizes.CharsPerToken == 0 {
		cfg.Sizes.CharsPerToken = r.calibrate(ctx, t, cfg.Model)
	}
	res := r.newResults(t, cfg)
	restore := r.savePolicy(ctx, t, cfg)
	defer restore()
	system := systemPrompt(cfg.Seed, cfg.Sizes)
	deviceID := newDeviceID()
	agentSystem := ""
	if cfg.Subagents.enabled() {
		agentSystem = agentSystemPrompt(cfg.Seed, cfg.Sizes, cfg.Subagents)
	}
	current := ""
	groups := groupSteps(plan(cfg.Stages, cfg.Variants, cfg.Alternate), cfg.carry())
	r.all = newOverall(&cfg, groups, time.Now())
	if r.Stderr != nil {
		fmt.Fprintln(r.Stderr, r.all.announce(&cfg))
	}
	for _, group := range groups {
		st := group[0]
		if err := r.prepare(ctx, t, cfg, st, &current); err != nil {
			return res, err
		}
		sr := &stageRun{cfg: &cfg, hc: r.HC, target: t, log: r.Log.With("variant", st.Variant),
			model: cfg.Model, system: system, agentSystem: agentSystem, deviceID: deviceID, variant: st.Variant,
			sessions: st.Sessions, now: time.Now}
		if cfg.carry() {
			stages := make([]int, len(group))
			for i, g := range group {
				stages[i] = g.Sessions
			}
			sums, turns := sr.runSeries(ctx, stages, func(n int) progress { return r.progress(step{n, st.Variant}, cfg) })
			res.Stages = append(res.Stages, sums...)
			res.Turns = append(res.Turns, turns...)
		} else {
			sum, turns := sr.run(ctx, r.progress(st, cfg))
			res.Stages = append(res.Stages, sum)
			res.Turns = append(res.Turns, turns...)
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// learnTimeScale sets cfg.TimeScale to the target's (Target.TimeScale):
// a simulator ten times faster than wall time, read at scale 1, would report
// every rate ten times too high and every time ten times too short. A
// --time-scale the target contradicts is refused with both values; a target
// that does not say (vLLM, an older warden) leaves --time-scale (default 1).
func (r *Runner) learnTimeScale(ctx context.Context, t *Target, cfg *Config) error {
	learned, source := t.TimeScale(ctx)
	switch {
	case source == "":
		if cfg.TimeScale != 1 {
			r.Log.Info("the target does not say its time scale; using --time-scale", "time_scale", cfg.TimeScale)
		}
		cfg.TimeScaleSource = "default: the target does not say"
		if cfg.TimeScaleSet {
			cfg.TimeScaleSource = "--time-scale"
		}
		return nil
	case cfg.TimeScaleSet && math.Abs(cfg.TimeScale-learned) > 1e-9*learned:
		return exit.New(2, fmt.Sprintf("--time-scale %g disagrees with the target: its engines run at time scale %g (%s); "+
			"drop --time-scale to read it from the target, or pass --time-scale %g", cfg.TimeScale, learned, source, learned))
	}
	if learned < 1 {
		return exit.New(2, fmt.Sprintf("the target runs at time scale %g (%s), slower than wall time; the bench reads times at scale 1 or more", learned, source))
	}
	if !cfg.TimeScaleSet && learned != 1 {
		r.Log.Info("time scale learned from the target", "time_scale", learned, "from", source)
	}
	cfg.TimeScale, cfg.TimeScaleSource = learned, source
	return nil
}

// groupSteps splits the plan into runs of one load each: with carry, the
// consecutive steps of one variant form one series; otherwise every step is
// its own.
func groupSteps(steps []step, carry bool) [][]step {
	var out [][]step
	for i, st := range steps {
		if carry && i > 0 && steps[i-1].Variant == st.Variant {
			out[len(out)-1] = append(out[len(out)-1], st)
			continue
		}
		out = append(out, []step{st})
	}
	return out
}

// calibrate measures the target tokenizer's characters per token of the
// generated text, or falls back to FallbackCharsPerToken with a warning.
func (r *Runner) calibrate(ctx context.Context, t *Target, model string) float64 {
	cpt, err := measureCharsPerToken(func(text string) (int, error) { return t.CountTokens(ctx, model, text) })
	if err != nil {
		r.Log.Warn("cannot measure the tokenizer; set --chars-per-token", "err", err, "chars_per_token", FallbackCharsPerToken)
		return FallbackCharsPerToken
	}
	r.Log.Info("measured the target's tokenizer", "chars_per_token", fmt.Sprintf("%.3f", cpt))
	return cpt
}

// prepare switches the policy when the step's variant differs from the
// current one and resets the prefix caches when asked.
func (r *Runner) prepare(ctx context.Context, t *Target, cfg Config, st step, current *string) error {
	if st.Variant != "" && st.Variant != *current {
		if err := t.SetPolicy(ctx, st.Variant); err != nil {
			return fmt.Errorf("switching policy to %q: %w", st.Variant, err)
		}
		r.Log.Info("policy switched", "policy", st.Variant)
		*current = st.Variant
	}
	if cfg.ResetCache {
		if err := t.ResetCache(ctx); err != nil {
			return fmt.Errorf("resetting prefix caches: %w", err)
		}
	}
	return nil
}

// savePolicy remembers the warden's policy before an A/B run and returns a
// function that puts it back.
func (r *Runner) savePolicy(ctx context.Context, t *Target, cfg Config) func() {
	if len(cfg.Variants) == 0 {
		return func() {}
	}
	orig, err := t.Policy(ctx)
	if err != nil || orig == "" {
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := t.SetPolicy(ctx, orig); err != nil {
			r.Log.Warn("could not restore the warden's policy", "policy", orig, "err", err)
		}
	}
}

func (r *Runner) progress(st step, cfg Config) progress {
	if r.Stderr == nil || !cfg.Progress {
		return noProgress{}
	}
	title := stageName(StageSummary{Sessions: st.Sessions, Variant: st.Variant})
	if st.Sessions < 10 { // aligned as %2d: " 1 session", " 8 sessions [off]", "16 sessions [off]"
		title = " " + title
	}
	if r.all != nil {
		title = "[" + r.all.next(time.Now()) + "] " + title
	}
	return newBarProgress(r.Stderr, title, cfg.wall(cfg.Stage))
}

func (r *Runner) newResults(t *Target, cfg Config) *Results {
	kind := "engine"
	if t.Warden {
		kind = "warden"
	}
	cj := configJSON{
		Seed: cfg.Seed, SystemTokens: cfg.Sizes.SystemTokens, FirstTokens: cfg.Sizes.FirstTokens,
		TurnTokens: cfg.Sizes.TurnTokens, CharsPerToken: cfg.Sizes.CharsPerToken, Turns: cfg.Turns,
		MaxTokens: cfg.MaxTokens, Stages: cfg.Stages, StageSeconds: cfg.Stage.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(),
		DrainSeconds: cfg.Drain.Seconds(), TimeScale: cfg.TimeScale, TimeScaleSource: cfg.TimeScaleSource, ResetCache: cfg.ResetCache, Alternate: cfg.Alternate,
		Carry: cfg.carry(), ClientRTT: cfg.RTT.Seconds(), Load: cfg.Load, Mix: mixString(cfg.Mix), Engines: cfg.Engines,
	}
	if cfg.ToolTime.enabled() {
		cj.ToolTime = cfg.ToolTime.String()
	}
	if sa := cfg.Subagents; sa.enabled() {
		cj.Subagents, cj.AgentSystemTokens, cj.AgentTaskTokens = sa.String(), sa.SystemTokens, []int{sa.TaskMin, sa.TaskMax}
	}
	return &Results{
		StartedAt: time.Now(), URL: t.URL, Target: kind, Model: cfg.Model, API: cfg.API, Variants: cfg.Variants,
		Config: cj,
	}
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// Failed says whether the run failed as a measurement: no turn succeeded,
// or a stage lost more than maxShare of its turns to errors (0 < maxShare
// <= 1). The error names the first such stage and its first error message.
func (res *Results) Failed(maxShare float64) error {
	ok, failed, first := 0, 0, ""
	for _, t := range res.Turns {
		if t.Error == "" {
			ok++
			continue
		}
		failed++
		if first == "" {
			first = t.Error
		}
	}
	if ok == 0 && failed > 0 {
		return fmt.Errorf("no turn succeeded (%d failed); the first error: %s", failed, first)
	}
	for _, s := range res.Stages {
		total := s.Turns + s.Errors
		if total == 0 || float64(s.Errors) <= maxShare*float64(total) {
			continue
		}
		msg := ""
		for _, t := range res.Turns {
			if t.Error != "" && !t.Canceled && t.Sessions == s.Sessions && t.Variant == s.Variant {
				msg = t.Error
				break
			}
		}
		return fmt.Errorf("stage %s: %d of %d turns failed, more than %.0f%%; the first error: %s",
			stageName(s), s.Errors, total, 100*maxShare, msg)
	}
	return nil
}
