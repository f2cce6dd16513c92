package bench

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// smallConfig is a quick stage: small prompts, short stage, tight drain.
func smallConfig(url string, stages ...int) Config {
	cfg := DefaultConfig()
	cfg.URL = url
	cfg.Sizes = Sizes{SystemTokens: 200, FirstTokens: 300, TurnTokens: 50, CharsPerToken: 4}
	cfg.Turns = 1
	cfg.MaxTokens = 16
	cfg.Stages = stages
	cfg.Stage = 400 * time.Millisecond
	cfg.Drain = 5 * time.Second
	cfg.Poll = 20 * time.Millisecond
	cfg.Variants = nil
	cfg.Carry = false // every stage a fresh start; series_test.go covers carry
	cfg.Progress = false
	return cfg
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func runBench(t *testing.T, cfg Config, abExplicit bool) *Results {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := (&Runner{Cfg: cfg, Log: quietLog()}).Run(ctx, abExplicit)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestStageAgainstBareEngine(t *testing.T) {
	f, srv := newFake(t, false)
	res := runBench(t, smallConfig(srv.URL, 2), false)
	if res.Target != "engine" || res.Model != "fake-model" {
		t.Fatalf("target %q model %q, want engine fake-model", res.Target, res.Model)
	}
	if len(res.Stages) != 1 {
		t.Fatalf("got %d stage summaries, want 1", len(res.Stages))
	}
	s := res.Stages[0]
	if s.Turns < 4 || s.SessionsFinished < 2 || s.Errors != 0 {
		t.Errorf("turns %d, sessions finished %d, errors %d: want >=4, >=2, 0", s.Turns, s.SessionsFinished, s.Errors)
	}
	// Every turn sent by the server is accounted for, in the stage or late.
	all, in := 0, 0
	for _, tr := range res.Turns {
		all += tr.OutputTokens
		if tr.InStage && tr.Error == "" {
			in += tr.OutputTokens
		}
	}
	f.mu.Lock()
	sent, broken := f.sent, f.broken
	f.mu.Unlock()
	if all != sent || in != s.OutputTokens || s.OutputTokens != s.Turns*f.tokens {
		t.Errorf("output tokens: all turns %d, server sent %d; in stage %d, summary %d, turns x %d = %d",
			all, sent, in, s.OutputTokens, f.tokens, s.Turns*f.tokens)
	}
	if broken != 0 {
		t.Errorf("%d follow-up turns did not extend the previous prompt + reply exactly", broken)
	}
	if s.TTFBP50 == nil || *s.TTFBP50 <= 0 || *s.TTFBP95 < *s.TTFBP50 {
		t.Errorf("TTFB p50 %v p95 %v: want 0 < p50 <= p95", s.TTFBP50, s.TTFBP95)
	}
	if s.PrefixHitPct == nil || *s.PrefixHitPct <= 0 || *s.PrefixHitPct >= 100 {
		t.Errorf("prefix hit %% = %v, want in (0, 100): shared system prompt and follow-ups hit", s.PrefixHitPct)
	}
	if s.ReplicasBusy == nil || *s.ReplicasBusy < 0 || *s.ReplicasBusy > 1 || s.BusyPolls == 0 {
		t.Errorf("replicas busy %v over %d polls, want a value in [0,1]", s.ReplicasBusy, s.BusyPolls)
	}
	if s.StayedPct != nil {
		t.Errorf("stayed %% = %v against a bare engine, want unknown", *s.StayedPct)
	}
	wantRate := float64(s.OutputTokens) * 60 / s.Seconds
	if s.OutputPerMin != wantRate || s.SessionsPerHour != float64(s.SessionsFinished)*3600/s.Seconds {
		t.Errorf("rates %v/min %v/h inconsistent with counts", s.OutputPerMin, s.SessionsPerHour)
	}
}

func TestWarmupOpensTheWindowLater(t *testing.T) {
	_, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 2)
	cfg.Warmup = 300 * time.Millisecond
	res := runBench(t, cfg, false)
	s := res.Stages[0]
	warm := 0
	for _, tr := range res.Turns {
		end := tr.StartS + tr.DurationS
		if end < 0 {
			warm++
			if tr.InStage {
				t.Errorf("turn ending at %.3fs, in the warm-up, counted in the stage", end)
			}
		}
	}
	if warm == 0 || s.Turns == 0 || s.Late < warm {
		t.Errorf("%d warm-up turns, %d counted, %d outside the window; want warm-up turns excluded", warm, s.Turns, s.Late)
	}
	if s.Seconds != cfg.Stage.Seconds() {
		t.Errorf("window %vs, want the stage length %vs", s.Seconds, cfg.Stage.Seconds())
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestSessionIDsSentTheClaudeCodeWay(t *testing.T) {
	f, srv := newFake(t, false)
	runBench(t, smallConfig(srv.URL, 1), false)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) < 2 {
		t.Fatalf("only %d requests", len(f.reqs))
	}
	perSession := map[string]int{}
	for _, r := range f.reqs {
		sid := r.Header.Get("X-Claude-Code-Session-Id")
		if r.Path != "/v1/messages" || r.Query != "beta=true" {
			t.Fatalf("request to %s?%s, want /v1/messages?beta=true", r.Path, r.Query)
		}
		if !uuidV4.MatchString(sid) {
			t.Fatalf("X-Claude-Code-Session-Id %q is not a UUIDv4", sid)
		}
		uid := gjson.GetBytes(r.Body, "metadata.user_id")
		if uid.Type != gjson.String {
			t.Fatalf("metadata.user_id is %s, want a JSON string", uid.Type)
		}
		meta := gjson.Parse(uid.String())
		if meta.Get("session_id").String() != sid || len(meta.Get("device_id").String()) != 64 || !meta.Get("account_uuid").Exists() {
			t.Fatalf("metadata.user_id %s does not carry session %s the Claude Code way", uid.String(), sid)
		}
		if sys := gjson.GetBytes(r.Body, "system"); !sys.IsArray() || sys.Get("0.type").String() != "text" {
			t.Fatalf("system is not text blocks: %s", sys.Raw)
		}
		if !gjson.GetBytes(r.Body, "stream").Bool() || gjson.GetBytes(r.Body, "max_tokens").Int() != 16 {
			t.Fatalf("stream/max_tokens wrong in %s", r.Body[:200])
		}
		perSession[sid]++
	}
	twice := 0
	for _, n := range perSession {
		if n > 2 {
			t.Fatalf("a session sent %d turns, want at most 1+1", n)
		}
		twice += btoi(n == 2)
	}
	if twice == 0 {
		t.Fatalf("no session kept its id over two turns: %v", perSession)
	}
}

func TestOpenAISessionIDs(t *testing.T) {
	f, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 1)
	cfg.API = APIOpenAI
	res := runBench(t, cfg, false)
	if s := res.Stages[0]; s.Turns == 0 || s.OutputTokens != s.Turns*f.tokens {
		t.Fatalf("turns %d output %d", s.Turns, s.OutputTokens)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs {
		sid := r.Header.Get("session-id")
		if r.Path != "/v1/chat/completions" || !uuidV4.MatchString(sid) {
			t.Fatalf("path %s session-id %q", r.Path, sid)
		}
		if gjson.GetBytes(r.Body, "prompt_cache_key").String() != sid ||
			!gjson.GetBytes(r.Body, "stream_options.include_usage").Bool() ||
			gjson.GetBytes(r.Body, "messages.0.role").String() != "system" {
			t.Fatalf("body does not carry the session the OpenAI way: %.300s", r.Body)
		}
	}
	if f.broken != 0 {
		t.Errorf("%d follow-ups did not extend the previous turn", f.broken)
	}
}

func TestABDriverSwitchesPolicyInOrder(t *testing.T) {
	tests := []struct {
		name      string
		alternate bool
		stages    []int
		want      []string // POST /warden/policy bodies, incl. the final restore
	}{
		{"variant-major like the reference", false, []int{1, 2}, []string{"off", "sticky", "custom"}},
		{"alternating", true, []int{1, 2, 3}, []string{"off", "sticky", "off", "sticky", "custom"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := newFake(t, true)
			f.policy = "custom"
			f.token = "s3cret"
			cfg := smallConfig(srv.URL, tc.stages...)
			cfg.AdminToken = "s3cret"
			cfg.Stage = 150 * time.Millisecond
			cfg.Variants = []string{"off", "sticky"}
			cfg.Alternate = tc.alternate
			cfg.ResetCache = true
			res := runBench(t, cfg, true)
			f.mu.Lock()
			defer f.mu.Unlock()
			if diff := cmp.Diff(tc.want, f.policySet); diff != "" {
				t.Errorf("policy switches (-want +got):\n%s", diff)
			}
			if f.resets != 2*len(tc.stages) {
				t.Errorf("%d cache resets, want one per stage run (%d)", f.resets, 2*len(tc.stages))
			}
			if res.Target != "warden" || len(res.Stages) != 2*len(tc.stages) {
				t.Fatalf("target %s, %d summaries", res.Target, len(res.Stages))
			}
			for _, s := range res.Stages {
				if s.Variant == "sticky" && (s.StayedPct == nil || *s.StayedPct != 100) {
					t.Errorf("sticky stage %d: stayed %v%%, want 100 (the fake pins by session)", s.Sessions, *s.StayedPct)
				}
				if s.ReplicasBusy == nil || s.PrefixHitPct == nil {
					t.Errorf("stage %+v lacks busy or hit %% from /warden/status", s)
				}
			}
		})
	}
}

func TestABAgainstBareEngine(t *testing.T) {
	_, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 1)
	cfg.Variants = []string{"off", "sticky"}
	_, err := (&Runner{Cfg: cfg, Log: quietLog()}).Run(context.Background(), true)
	if err == nil || !strings.Contains(err.Error(), "bare engine") {
		t.Fatalf("explicit --ab against an engine: err %v, want a bare-engine error", err)
	}
	res := runBench(t, cfg, false) // the default --ab is dropped with a notice
	if len(res.Stages) != 1 || res.Stages[0].Variant != "" {
		t.Fatalf("stages %+v, want one plain run", res.Stages)
	}
}

func TestABPolicyRefused(t *testing.T) {
	f, srv := newFake(t, true)
	f.token = "s3cret"
	cfg := smallConfig(srv.URL, 1)
	cfg.Variants = []string{"off", "sticky"}
	res, err := (&Runner{Cfg: cfg, Log: quietLog()}).Run(context.Background(), true)
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") || len(res.Stages) != 0 {
		t.Fatalf("policy switch refused: err %v, stages %d; want a 403 error before any stage", err, len(res.Stages))
	}
}

func TestPlan(t *testing.T) {
	got := plan([]int{4, 8, 16}, []string{"off", "sticky"}, true)
	want := []step{{4, "off"}, {4, "sticky"}, {8, "sticky"}, {8, "off"}, {16, "off"}, {16, "sticky"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alternate (-want +got):\n%s", diff)
	}
	got = plan([]int{4, 8}, []string{"off", "sticky"}, false)
	want = []step{{4, "off"}, {8, "off"}, {4, "sticky"}, {8, "sticky"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("default (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]step{{4, ""}}, plan([]int{4}, nil, true)); diff != "" {
		t.Errorf("no variants (-want +got):\n%s", diff)
	}
}
