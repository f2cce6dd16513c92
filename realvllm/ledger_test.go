package realvllm_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/convtest"
)

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
	convtest.Check(t, w.url, turns, 32, 64)
}
