package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A turn the bench ends itself (Ctrl-C cancels its context) is canceled,
// not failed: summarize counts it apart from the errors, and a server error
// stays an error (issue 45).
func TestCanceledTurnsAreNotFailures(t *testing.T) {
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body) // read whole: the server then notices the client leave
		close(arrived)
		<-r.Context().Done() // answers nothing until the client gives up
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	conv := newConversation("openai", "m", "system", "s1", "d1", "", 8)
	conv.add("user", "hi")
	res := doTurn(ctx, srv.Client(), srv.URL, conv, 0, time.Now)
	if res.Err == nil || !res.Canceled {
		t.Fatalf("interrupted turn: err %v canceled %v, want an error marked canceled", res.Err, res.Canceled)
	}
	failed := doTurn(context.Background(), srv.Client(), srv.URL+"/?fail=1#", conv, 0, time.Now)
	if failed.Err == nil || failed.Canceled {
		t.Fatalf("a 500: err %v canceled %v, want an error not marked canceled", failed.Err, failed.Canceled)
	}
	s := summarize("off", 2, 60, []TurnRecord{
		{Session: 0, Turn: 1, InStage: true, Error: res.Err.Error(), Canceled: true},
		{Session: 1, Turn: 1, InStage: true, Error: failed.Err.Error()},
	}, nil, 0, 0, false)
	if s.Errors != 1 || s.Canceled != 1 {
		t.Errorf("errors %d canceled %d, want 1 and 1", s.Errors, s.Canceled)
	}
}
