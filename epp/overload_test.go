package epp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
)

// TestToldToRetryAtOnce: with every slot of the one replica taken, a
// request that waits past --queue-max-wait is answered by the picker at
// once (it reaches no endpoint): 429 with retry-after on OpenAI's paths.
func TestToldToRetryAtOnce(t *testing.T) {
	r := newRig(t, 1, router.Config{FairShare: true, QueueMaxWait: 20 * time.Millisecond}, Config{Fallbacks: DefaultFallbacks})
	var taken []router.Placement
	for i := range 32 { // the replica's max_num_seqs
		pl := r.core.Place(context.Background(), place.Request{Key: fmt.Sprint("farm#agent:", i), Root: "farm"})
		if pl.Rank < 0 {
			t.Fatalf("slot %d: %+v", i, pl.Decision)
		}
		taken = append(taken, pl)
	}
	_, out := r.request(t, nil, chat, "x-claude-code-session-id", "chat")
	ir := out[len(out)-1].GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 429 {
		t.Fatalf("a request past the queue's bound: %v, want an immediate 429", out[len(out)-1])
	}
	after := ""
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "retry-after" {
			after = string(h.GetHeader().GetRawValue())
		}
	}
	if after == "" {
		t.Errorf("no retry-after in %v", ir.GetHeaders())
	}
	for i := range taken {
		r.core.Finish(&taken[i], router.Outcome{Status: 200})
	}
}
