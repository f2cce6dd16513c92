package serve

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/convtest"
	"github.com/lmwarden/warden/internal/simproc"
)

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
	convtest.Check(t, w.url, turns, 32, 64)
}

// TestRouteEventsThatNeverComeFallBackToTheEstimate: a replica named with
// an events endpoint its engine does not publish on (here: the simulator
// without --kv-events-config) says so once after a few turns, shows
// "silent" in the status, and keeps being placed by the estimate.
func TestRouteEventsThatNeverComeFallBackToTheEstimate(t *testing.T) {
	eng := simproc.Start(t, "--sim-time-scale", "10", "--sim-output-tokens", "8")
	sock := "ipc://" + filepath.Join(t.TempDir(), "nobody.sock")
	port := simproc.FreePort(t)
	w := startRoute(t, port, "--replica", eng.URL+"#kv="+sock, "--state-file", "none")
	body := `{"model":"test-model","max_tokens":8,"messages":[{"role":"user","content":"` + strings.Repeat("tell me more ", 60) + `"}]}`
	for range 4 {
		if resp, b := post(t, w.url+"/v1/chat/completions", body, map[string]string{"session_id": "silent-1"}); resp.StatusCode != 200 {
			t.Fatalf("turn: %s %s", resp.Status, b)
		}
	}
	simproc.Poll(t, "the replica's events taken to be off", func() bool {
		return strings.Contains(w.stderr.String(), "KV events: none arrived although the engine served turns")
	})
	if got := w.status(t).Replicas[0].KVEvents; got != "silent" {
		t.Errorf("status kv_events = %q, want silent", got)
	}
	if strings.Count(w.stderr.String(), "KV events: none arrived") != 1 {
		t.Errorf("the fallback was said more than once:\n%s", w.stderr)
	}
	w.stop(t)
}
