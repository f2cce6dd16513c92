package router

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/place"
)

// admitCore is a core with the admission queue over one replica of
// seqs running slots.
func admitCore(t *testing.T, seqs int, maxWait time.Duration, maxLen int) *Core {
	return testCoreBackends(t, Config{FairShare: true, QueueMaxWait: maxWait, QueueMaxLen: maxLen},
		[]Backend{{Rank: 0, URL: "http://127.0.0.1:9000", MaxNumSeqs: seqs}})
}

// placeAsync places req on c in the background.
func placeAsync(c *Core, req place.Request) <-chan Placement {
	out := make(chan Placement, 1)
	go func() { out <- c.Place(context.Background(), req) }()
	return out
}

func queued(c *Core) int { return c.admit.status().Queued }

func finish(t *testing.T, c *Core, pl Placement) {
	t.Helper()
	if pl.Rank < 0 {
		t.Fatalf("finishing a request that was not placed (%s)", pl.Reason)
	}
	c.Finish(&pl, Outcome{Status: http.StatusOK})
}

// A tree's parallel requests beyond its fair share (two of three slots
// with two trees active) leave a slot free for another tree that was
// active there: its next turn starts at once, and the tree's queued
// request goes when a slot frees.
func TestAdmissionLeavesAnActiveTreesNextTurnASlot(t *testing.T) {
	c := admitCore(t, 3, time.Minute, 16)
	turn := place.Request{Key: "chat", Root: "chat"}
	finish(t, c, c.Place(context.Background(), turn)) // the conversation is active, nothing in flight
	flood := func(agent string) place.Request {
		return place.Request{Key: "farm#agent:" + agent, Root: "farm", Subagent: true}
	}
	first := c.Place(context.Background(), flood("1"))
	share := c.Place(context.Background(), flood("2"))
	if first.Rank != 0 || share.Rank != 0 {
		t.Fatalf("the flood's first two requests (its fair share): %+v, %+v", first.Decision, share.Decision)
	}
	second := placeAsync(c, flood("3"))
	simproc.Poll(t, "the flood's third request queued (one slot is the conversation's)", func() bool { return queued(c) == 1 })
	st := c.Status().Admission
	if st == nil || st.Queued != 1 || len(st.Trees) != 2 || st.Trees[0].Root != decision.Session("farm") || st.Trees[0].InFlight != 2 {
		t.Errorf("status: %+v, want the farm's tree first (hashed), two in flight, one queued", st)
	}
	next := c.Place(context.Background(), turn)
	if next.Rank != 0 {
		t.Fatalf("the conversation's next turn: %+v, want placed at once", next.Decision)
	}
	finish(t, c, first)
	pl := <-second
	if pl.Rank != 0 || pl.Waited <= 0 {
		t.Fatalf("the flood's second request: %+v waited %s, want placed after a wait", pl.Decision, pl.Waited)
	}
	finish(t, c, pl)
	finish(t, c, next)
	finish(t, c, share)
}

// The queue's order: a tree with nothing in flight goes before one with
// requests in flight, whatever came first; a request marked background
// goes after every unmarked one.
func TestAdmissionOrder(t *testing.T) {
	c := admitCore(t, 2, time.Minute, 16)
	a := c.Place(context.Background(), place.Request{Key: "farm#agent:1", Root: "farm"})
	b := c.Place(context.Background(), place.Request{Key: "farm#agent:2", Root: "farm"})
	third := placeAsync(c, place.Request{Key: "farm#agent:3", Root: "farm"})
	simproc.Poll(t, "the farm's third request queued", func() bool { return queued(c) == 1 })
	batch := placeAsync(c, place.Request{Key: "script", Root: "script", Priority: PriorityBackground})
	simproc.Poll(t, "the script's request queued", func() bool { return queued(c) == 2 })
	chat := placeAsync(c, place.Request{Key: "chat", Root: "chat"})
	simproc.Poll(t, "the conversation's turn queued", func() bool { return queued(c) == 3 })

	finish(t, c, a)
	first := <-chat // a tree with nothing in flight, before the farm's third
	select {
	case pl := <-third:
		t.Fatalf("the farm's third request placed with the conversation's turn: %+v", pl.Decision)
	default:
	}
	finish(t, c, b)
	second := <-third // unmarked, before the background request
	finish(t, c, first)
	finish(t, c, <-batch)
	finish(t, c, second)
}

// Past the bound the client is told to retry: a request that waited
// longer than QueueMaxWait, and the last in the order when the queue is
// over QueueMaxLen; nothing waits for ever, nothing is dropped.
func TestAdmissionBoundTellsTheClientToRetry(t *testing.T) {
	c := admitCore(t, 2, 50*time.Millisecond, 1)
	a := c.Place(context.Background(), place.Request{Key: "farm#agent:1", Root: "farm"})
	b := c.Place(context.Background(), place.Request{Key: "farm#agent:2", Root: "farm"})
	if pl := c.Place(context.Background(), place.Request{Key: "farm#agent:3", Root: "farm"}); pl.Rank >= 0 || pl.Reason != place.ReasonBusy {
		t.Errorf("a request past the wait bound: %+v, want told to retry (busy)", pl.Decision)
	}
	c.admit.maxWait = time.Minute
	late := placeAsync(c, place.Request{Key: "farm#agent:4", Root: "farm"})
	simproc.Poll(t, "the farm's request queued", func() bool { return queued(c) == 1 })
	chat := placeAsync(c, place.Request{Key: "chat", Root: "chat"})
	if pl := <-late; pl.Reason != place.ReasonBusy {
		t.Errorf("the last in the order past the queue's length: %+v, want told to retry", pl.Decision)
	}
	finish(t, c, a)
	finish(t, c, <-chat)
	finish(t, c, b)
	if n := c.admit.status().Busy; n != 2 {
		t.Errorf("told to retry %d, want 2", n)
	}
	if got := OverloadStatus("/v1/messages"); got != 529 {
		t.Errorf("Anthropic's path: %d, want 529", got)
	}
	if got := OverloadStatus("/v1/chat/completions"); got != http.StatusTooManyRequests {
		t.Errorf("OpenAI's path: %d, want 429", got)
	}
}
