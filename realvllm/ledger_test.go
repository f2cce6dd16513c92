package realvllm_test

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

// evictedMiss is a warden_prefix_miss_tokens_total series with the
// evicted reason and a value above zero.
var evictedMiss = regexp.MustCompile(`(?m)^warden_prefix_miss_tokens_total\{[^}]*reason="evicted"[^}]*\} [1-9]`)

// TestLedgerOnRealVLLM is issue 42's check on vLLM 0.32's CPU build:
// `warden serve --device cpu --dp 2` (KV events on by default) with
// -- --block-size 32 --max-model-len 2016 --num-gpu-blocks-override 80
// (about 2,560 tokens of KV a replica), eight conversations sharing a
// system prompt, five turns each, round by round. The later turns find
// part of their prefix evicted; the ledger, built from the engines' own
// events, must predict each follow-up turn's cached tokens (vLLM's
// prompt_tokens_details.cached_tokens) within 64 tokens on at least 90 %
// of them, label some misses as evictions, and count misses by reason in
// /metrics.
func TestLedgerOnRealVLLM(t *testing.T) {
	needEngine(t)
	log := filepath.Join(t.TempDir(), "decisions.log")
	w := startWarden(t, nil, "serve", "--device", "cpu", "--dp", "2", "--vllm", install.vllm,
		"--model", install.model, "--served-model-name", served, "--cpu-kv-cache", "256MiB",
		"--startup-timeout", "8m", "--stop-grace", "15s", "--decision-log", log,
		"--", "--dtype", "float32", "--enforce-eager", "--block-size", "32", "--max-model-len", "2016",
		"--num-gpu-blocks-override", "80")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	turns, err := convtest.Play(ctx, convtest.Plan{URL: w.url, Model: served, Conversations: 8, Turns: 5,
		SystemWords: 60, FirstWords: 40, TurnWords: 20, MaxTokens: 32})
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
	if !evictedMiss.Match(text) {
		t.Errorf("/metrics has no warden_prefix_miss_tokens_total above 0 with reason=\"evicted\"")
	}
}
