package bench

import (
	"math"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

// simConfig runs the reference sizes against one simulator at time scale 20:
// a 20 s (simulated) stage of 2 sessions with one follow-up turn each.
func simConfig(url string, api API) Config {
	cfg := DefaultConfig()
	cfg.URL, cfg.API = url, api
	cfg.Turns = 1
	cfg.MaxTokens = 32
	cfg.Stages = []int{2}
	cfg.Stage = 20 * time.Second
	cfg.Drain = 60 * time.Second
	cfg.Poll = time.Second
	cfg.TimeScale = 20
	cfg.Variants = nil
	cfg.Progress = false
	return cfg
}

func TestAgainstSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a simulator process")
	}
	for _, api := range []API{APIAnthropic, APIOpenAI} {
		t.Run(string(api), func(t *testing.T) {
			p := simproc.Start(t, "--sim-time-scale", "20", "--enable-prompt-tokens-details", "--max-num-seqs", "32")
			res := runBench(t, simConfig(p.URL, api), false)
			s := res.Stages[0]
			if s.Turns < 2 || s.Errors != 0 || s.SessionsFinished < 1 {
				t.Fatalf("turns %d errors %d finished %d", s.Turns, s.Errors, s.SessionsFinished)
			}
			// Sizes: the first turn's prompt is system + first message (+ the
			// chat template's few tokens), within 2%.
			want := float64(DefaultConfig().Sizes.SystemTokens + DefaultConfig().Sizes.FirstTokens)
			if s.MeanPromptFirst == nil {
				t.Errorf("no usage.prompt_tokens on first turns")
			} else if got := *s.MeanPromptFirst; math.Abs(got-want)/want > 0.02 {
				t.Errorf("first-turn prompt tokens %.0f, want %.0f ±2%% (the sim's tokenizer moved: recalibrate DefaultCharsPerToken)", got, want)
			}
			out, all := 0, 0
			for _, tr := range res.Turns {
				if tr.Error == "" {
					all += tr.OutputTokens
				}
				if tr.InStage && tr.Error == "" {
					if tr.OutputTokens < 1 || tr.OutputTokens > 32 {
						t.Errorf("turn output %d tokens, want 1..32 (max_tokens)", tr.OutputTokens)
					}
					out += tr.OutputTokens
				}
				if api == APIOpenAI && tr.Turn == 2 && tr.Error == "" && tr.CachedTokens < tr.PromptTokens/2 {
					t.Errorf("second turn cached %d of %d prompt tokens, want most of it", tr.CachedTokens, tr.PromptTokens)
				}
			}
			if out != s.OutputTokens {
				t.Errorf("summary output %d, turns %d", s.OutputTokens, out)
			}
			if gen := p.Metrics(t)["vllm:generation_tokens_total"]; gen != float64(all) {
				t.Errorf("the sim generated %v tokens, the bench counted %d", gen, all)
			}
			if s.PrefixHitPct == nil || *s.PrefixHitPct <= 0 {
				t.Errorf("prefix hit %% from the sim's counters = %v, want > 0", s.PrefixHitPct)
			}
			if s.TTFBP50 == nil || *s.TTFBP50 <= 0 || s.ReplicasBusy == nil || *s.ReplicasBusy <= 0 || *s.ReplicasBusy > 1 {
				t.Errorf("TTFB p50 %v, busy %v", s.TTFBP50, s.ReplicasBusy)
			}
		})
	}
}

// The agent-like load against the simulator: subagent requests (the
// parent's session id plus x-claude-code-agent-id) are served, and every
// generated token is in a turn record.
func TestAgentLoadAgainstSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a simulator process")
	}
	p := simproc.Start(t, "--sim-time-scale", "20", "--enable-prompt-tokens-details", "--max-num-seqs", "32")
	cfg := simConfig(p.URL, APIAnthropic)
	if err := cfg.applyLoad(LoadAgent); err != nil {
		t.Fatal(err)
	}
	cfg.Stage = 20 * time.Second
	cfg.ToolTime = ToolTime{Median: 500 * time.Millisecond, P90: 2 * time.Second, Max: 5 * time.Second}
	cfg.Subagents.Share = 1 // every session spawns, so a short stage has subagents
	cfg.Subagents.Turns = 1
	res := runBench(t, cfg, false)
	s := res.Stages[0]
	if s.Errors != 0 || s.Turns < 3 || s.SubagentTurns == 0 {
		t.Fatalf("turns %d (subagents %d), errors %d", s.Turns, s.SubagentTurns, s.Errors)
	}
	all := 0
	for _, tr := range res.Turns {
		if tr.Error == "" {
			all += tr.OutputTokens
		}
	}
	if gen := p.Metrics(t)["vllm:generation_tokens_total"]; gen != float64(all) {
		t.Errorf("the sim generated %v tokens, the bench counted %d", gen, all)
	}
	if res.Config.Load != LoadAgent || res.Config.Subagents == "" || res.Config.ToolTime == "" || res.Config.Mix == "" {
		t.Errorf("results do not record the agent load: %+v", res.Config)
	}
}
