package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AgentHeader names a subagent's requests, as Claude Code's Agent tool does:
// the parent's session id plus this header with "a" and 16 hex digits
// (docs/clients.md). bench sends it over both APIs.
const AgentHeader = "x-claude-code-agent-id"

// The bench's loads (--load).
const (
	LoadReference = "reference" // the reference measurement's load (docs/reference-rig.md)
	LoadAgent     = "agent"     // tool time, mixed lengths and subagents (docs/benchmarks.md, "The agent-like load")
)

// ToolTime is the distribution of the pause between a turn's answer and the
// session's next turn (the agent running its tools), in simulated time: a
// log-normal with the given median and 90th percentile, cut at Max. A zero
// Median means no pause; P90 == Median a fixed one.
type ToolTime struct {
	Median, P90 time.Duration
	Max         time.Duration // 0 = no cap
}

// z90 is the standard normal's 90th percentile.
const z90 = 1.2815515655446004

func (t ToolTime) enabled() bool { return t.Median > 0 }

// draw returns one pause from rng's next normal deviate.
func (t ToolTime) draw(rng *rand.Rand) time.Duration {
	if t.Median <= 0 {
		return 0
	}
	d := float64(t.Median)
	if t.P90 > t.Median {
		sigma := math.Log(float64(t.P90)/float64(t.Median)) / z90
		d *= math.Exp(sigma * rng.NormFloat64())
	}
	if t.Max > 0 && d > float64(t.Max) {
		d = float64(t.Max)
	}
	return time.Duration(d)
}

// String is the flag's spelling of t ("0" = none).
func (t ToolTime) String() string {
	if !t.enabled() {
		return "0"
	}
	s := t.Median.String() + "," + t.P90.String()
	if t.Max > 0 {
		s += "," + t.Max.String()
	}
	return s
}

func (t ToolTime) validate() error {
	switch {
	case t.Median < 0 || t.P90 < 0 || t.Max < 0:
		return fmt.Errorf("--tool-time: durations must be >= 0, got %s", t)
	case t.Median == 0 && (t.P90 != 0 || t.Max != 0):
		return fmt.Errorf("--tool-time: a median of 0 means no pause; give 0 alone")
	case t.P90 < t.Median:
		return fmt.Errorf("--tool-time: p90 %s is below the median %s", t.P90, t.Median)
	case t.Max != 0 && t.Max < t.Median:
		return fmt.Errorf("--tool-time: max %s is below the median %s", t.Max, t.Median)
	case t.Max > time.Hour:
		return fmt.Errorf("--tool-time: max %s is over 1h", t.Max)
	}
	return nil
}

// parseToolTime parses "0" (none), "D" (a fixed pause), "MEDIAN,P90" or
// "MEDIAN,P90,MAX" (Go durations; a bare 0 is allowed).
func parseToolTime(s string) (ToolTime, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || s == "none" {
		return ToolTime{}, nil
	}
	fields := strings.Split(s, ",")
	if len(fields) > 3 {
		return ToolTime{}, fmt.Errorf("--tool-time: %q is not MEDIAN,P90[,MAX] (e.g. 3s,30s)", s)
	}
	var ds []time.Duration
	for _, f := range fields {
		f = strings.TrimSpace(f)
		if f == "0" {
			ds = append(ds, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return ToolTime{}, fmt.Errorf("--tool-time: %q is not a duration (MEDIAN,P90[,MAX], e.g. 3s,30s)", f)
		}
		ds = append(ds, d)
	}
	t := ToolTime{Median: ds[0], P90: ds[0]}
	if len(ds) > 1 {
		t.P90 = ds[1]
	}
	if len(ds) > 2 {
		t.Max = ds[2]
	}
	return t, t.validate()
}

// Subagents makes a share of sessions spawn subagents after their first
// turn, as Claude Code's Agent tool does: N small conversations in parallel,
// each with the subagents' shared system prompt, a unique task message and
// Turns follow-ups, sent with the parent's session id and their own agent
// id. The parent waits for all of them and sends their final replies as its
// next turn's user message.
type Subagents struct {
	Share        float64 // of sessions that spawn (drawn per session from the seed)
	N            int     // subagents per spawning session, run in parallel
	Turns        int     // follow-up turns of each subagent after its task message
	SystemTokens int     // the system prompt all subagents share
	TaskMin      int     // tokens of a subagent's unique task message: uniform in [TaskMin, TaskMax]
	TaskMax      int
}

// Defaults of the subagents' sizes that --subagents does not set
// (judgement: Claude Code's general-purpose agent prompt is shorter than the
// main loop's; its task prompts are a paragraph to a page).
const (
	DefaultAgentSystemTokens = 1500
	DefaultAgentTaskMin      = 300
	DefaultAgentTaskMax      = 2000
)

func (s Subagents) enabled() bool { return s.Share > 0 && s.N > 0 }

// String is the flag's spelling of s ("0" = none).
func (s Subagents) String() string {
	if !s.enabled() {
		return "0"
	}
	return fmt.Sprintf("%s,%d,%d", strconv.FormatFloat(s.Share, 'f', -1, 64), s.N, s.Turns)
}

func (s Subagents) validate() error {
	switch {
	case s.Share < 0 || s.Share > 1 || math.IsNaN(s.Share):
		return fmt.Errorf("--subagents: the share must be in [0, 1], got %v", s.Share)
	case s.Share == 0:
		return nil
	case s.N < 1 || s.N > 64:
		return fmt.Errorf("--subagents: N must be in 1..64, got %d", s.N)
	case s.Turns < 0 || s.Turns > 1000:
		return fmt.Errorf("--subagents: TURNS must be in 0..1000, got %d", s.Turns)
	case s.SystemTokens < 0 || s.TaskMin < 1 || s.TaskMax < s.TaskMin:
		return fmt.Errorf("--subagents: sizes must be positive (system %d, task %d..%d)", s.SystemTokens, s.TaskMin, s.TaskMax)
	}
	return nil
}

// parseSubagents parses "SHARE,N,TURNS" (e.g. 0.25,2,3); "", "0" and "none"
// mean no subagents.
func parseSubagents(s string) (Subagents, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || s == "none" {
		return Subagents{}, nil
	}
	f := strings.Split(s, ",")
	bad := fmt.Errorf("--subagents: %q is not SHARE,N,TURNS (e.g. 0.25,2,3)", s)
	if len(f) != 3 {
		return Subagents{}, bad
	}
	share, err1 := strconv.ParseFloat(strings.TrimSpace(f[0]), 64)
	n, err2 := strconv.Atoi(strings.TrimSpace(f[1]))
	turns, err3 := strconv.Atoi(strings.TrimSpace(f[2]))
	if err1 != nil || err2 != nil || err3 != nil {
		return Subagents{}, bad
	}
	sa := Subagents{Share: share, N: n, Turns: turns, SystemTokens: DefaultAgentSystemTokens,
		TaskMin: DefaultAgentTaskMin, TaskMax: DefaultAgentTaskMax}
	if share == 0 {
		sa = Subagents{}
	}
	return sa, sa.validate()
}

// Presets of --load agent (docs/benchmarks.md, "The agent-like load", says
// which numbers are judgement).
var (
	agentToolTime  = ToolTime{Median: 3 * time.Second, P90: 30 * time.Second, Max: 2 * time.Minute}
	agentMix       = []Shape{{2000, 10}, {7300, 5}, {15000, 3}}
	agentSubagents = Subagents{Share: 0.25, N: 2, Turns: 3, SystemTokens: DefaultAgentSystemTokens,
		TaskMin: DefaultAgentTaskMin, TaskMax: DefaultAgentTaskMax}
)

// applyLoad sets the load's tool time, mix and subagents ("" and
// "reference" change nothing). Flags given explicitly override them
// afterwards (Options.read).
func (c *Config) applyLoad(name string) error {
	switch strings.TrimSpace(name) {
	case "", LoadReference:
		c.Load = "" // the default: recorded as nothing, as before --load existed
	case LoadAgent:
		c.Load = LoadAgent
		c.ToolTime = agentToolTime
		c.Mix = append([]Shape(nil), agentMix...)
		c.Subagents = agentSubagents
	default:
		return fmt.Errorf("--load must be %s or %s, got %q", LoadReference, LoadAgent, name)
	}
	return nil
}

// seeded returns a random stream named by the seed, a purpose and parts.
func seeded(seed int64, purpose string, parts ...any) *rand.Rand {
	return newTextGen(append([]any{seed, purpose}, parts...)...).rng
}

// with returns stream followed by more, never sharing stream's array.
func with(stream []any, more ...any) []any {
	return append(append(make([]any, 0, len(stream)+len(more)), stream...), more...)
}

// toolPause is the pause after turn `turn` of a session's conversation
// (agent -1) or of its subagent `agent`, simulated.
func (c *Config) toolPause(stream []any, agent, turn int) time.Duration {
	return c.ToolTime.draw(seeded(c.Seed, "tool-time", with(stream, agent, turn)...))
}

// spawns says whether the session spawns subagents.
func (c *Config) spawns(stream []any) bool {
	return c.Subagents.enabled() && seeded(c.Seed, "subagents", stream...).Float64() < c.Subagents.Share
}

// agentID is the session's subagent j's id: "a" and 16 hex digits.
func (c *Config) agentID(stream []any, j int) string {
	return fmt.Sprintf("a%016x", seeded(c.Seed, "agent-id", with(stream, j)...).Uint64())
}

// agentTaskTokens is the size of subagent j's task message.
func (c *Config) agentTaskTokens(stream []any, j int) int {
	s := c.Subagents
	return s.TaskMin + seeded(c.Seed, "agent-task", with(stream, j)...).IntN(s.TaskMax-s.TaskMin+1)
}

// agentSystemPrompt is the system prompt every subagent shares.
func agentSystemPrompt(seed int64, s Sizes, sa Subagents) string {
	return newTextGen(seed, "agent-system").text(s.chars(sa.SystemTokens))
}

// stream names session k's draws and texts. In a series it depends on k
// alone (both variants of an A/B get the same sessions in the same order);
// otherwise on the stage's concurrency and k.
func (r *stageRun) stream(k int) []any {
	if r.series {
		return []any{"series", k}
	}
	return []any{r.sessions, k}
}

// pause waits out the tool time after a turn (agent -1: the session's own
// conversation) and reports whether the session goes on: false when the
// stage ended, quit closed or ctx ended meanwhile. Nothing is in flight.
func (r *stageRun) pause(ctx context.Context, quit <-chan struct{}, k, agent, turn int) bool {
	if !r.cfg.ToolTime.enabled() {
		return true
	}
	t := time.NewTimer(r.cfg.wall(r.cfg.toolPause(r.stream(k), agent, turn)))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-r.stop:
	case <-quit:
	}
	return false
}

// runSubagents plays session k's subagents in parallel and returns their
// final replies joined, the parent's next user message; false when any of
// them did not finish (a failed turn, or the stage ended).
func (r *stageRun) runSubagents(ctx context.Context, k int, parentID, home string, quit <-chan struct{}) (string, bool) {
	n := r.cfg.Subagents.N
	out := make([]string, n)
	ok := make([]bool, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j], ok[j] = r.runSubagent(ctx, k, j, parentID, home, quit)
		}()
	}
	wg.Wait()
	var replies []string
	for j, o := range ok {
		if !o {
			return "", false
		}
		if out[j] != "" {
			replies = append(replies, out[j])
		}
	}
	return strings.Join(replies, "\n\n"), true
}

// runSubagent plays subagent j of session k: its task message, then
// Subagents.Turns follow-ups with tool time between them, and returns its
// last reply. Its requests carry the parent's session id (header and
// metadata) and its agent id; its turns are recorded against the parent's
// first replica.
func (r *stageRun) runSubagent(ctx context.Context, k, j int, parentID, home string, quit <-chan struct{}) (string, bool) {
	stream := r.stream(k)
	agent := r.cfg.agentID(stream, j)
	sizes := r.cfg.Sizes
	sizes.FirstTokens = r.cfg.agentTaskTokens(stream, j)
	text := newSessionText(r.cfg.Seed, sizes, with(stream, "agent", j)...)
	billing := ""
	if r.cfg.BillingHeader && r.cfg.API != APIOpenAI {
		billing = billingLine(parentID + "/" + agent)
	}
	conv := newConversation(r.cfg.API, r.model, r.agentSystem, parentID, r.deviceID, billing, r.cfg.MaxTokens)
	conv.agentID = agent
	turns := r.cfg.Subagents.Turns
	last := ""
	for turn := 1; turn <= 1+turns; turn++ {
		if r.stopped() || closed(quit) {
			return "", false
		}
		conv.add("user", text.next())
		r.inflight.Add(1)
		res := doTurn(ctx, r.hc, r.target.URL, conv, r.cfg.wall(r.cfg.RTT), r.now)
		r.inflight.Add(-1)
		r.completed.Add(1)
		r.record(k, parentID, agent, turn, res, home, turn == 1+turns)
		if res.Err != nil {
			r.log.Debug("subagent "+turnEnd(res), "session", k, "agent", agent, "turn", turn, "err", res.Err)
			r.backoff()
			return "", false
		}
		conv.add("assistant", res.Text)
		last = res.Text
		if turn <= turns && !r.pause(ctx, quit, k, j, turn) {
			return "", false
		}
	}
	return last, true
}
