package serve

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/convtest"
)

var evictedMetric = regexp.MustCompile(`(?m)^warden_prefix_miss_tokens_total\{[^}]*reason="evicted"[^}]*\} [1-9]`)

// TestServeLedgerPredictsCachedTokens is issue 42's check on the
// simulator: two engines whose caches hold about 2,560 tokens each, eight
// conversations sharing a system prompt, five turns each, round by round.
// The later turns find part of their prefix evicted; the ledger built from
// the engines' KV events must predict each follow-up turn's cached tokens
// within 64 tokens on at least 90 % of them, label some misses as
// evictions, and count misses by reason in /metrics.
func TestServeLedgerPredictsCachedTokens(t *testing.T) {
	log := filepath.Join(t.TempDir(), "decisions.log")
	w := startServe(t, "--dp", "2", "--decision-log", log, "--", "--max-model-len", "2016",
		"--sim-kv-tokens", "2560", "--sim-output-tokens", "40", "--sim-time-scale", "10")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	turns, err := convtest.Play(ctx, convtest.Plan{URL: w.url, Model: "demo", Conversations: 8, Turns: 5,
		SystemWords: 150, FirstWords: 120, TurnWords: 60, MaxTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	if err := convtest.Join(turns, log, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	acc := convtest.Measure(turns, 64)
	t.Log(acc)
	for _, tr := range turns {
		l := tr.Line
		t.Logf("conv %d turn %d replica %s: prompt %d cached %d predicted %d (%s) miss %q route %s",
			tr.Conversation, tr.Turn, tr.Replica, tr.Prompt, tr.Cached, l.Predicted, l.PredFrom, l.MissReason, l.Route)
	}
	if acc.FollowUps != 32 || acc.Within*10 < acc.FollowUps*9 {
		t.Errorf("%v: want at least 90 %% of the 32 follow-ups within 64 tokens", acc)
	}
	if acc.Reasons["evicted"] == 0 {
		t.Errorf("no follow-up turn's miss was labelled evicted: %v", acc.Reasons)
	}
	resp, err := http.Get(w.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !evictedMetric.Match(text) {
		t.Errorf("/metrics has no warden_prefix_miss_tokens_total above 0 with reason=\"evicted\":\n%s", text)
	}
	w.stop(t)
}
