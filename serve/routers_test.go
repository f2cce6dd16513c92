package serve

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/convtest"
	"github.com/lmwarden/warden/internal/simproc"
)

// kvEngine starts a simulator publishing vLLM's KV-cache events on ipc
// sockets and returns its --replica spec naming them.
func kvEngine(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kv") // short: an ipc path must fit in 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kv, replay := "ipc://"+dir+"/kv.sock", "ipc://"+dir+"/kv-replay.sock"
	s := simproc.Start(t, "--sim-time-scale", "50", "--enable-prompt-tokens-details", "--kv-events-config", fmt.Sprintf(
		`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":%q,"replay_endpoint":%q}`, kv, replay))
	return s.URL + "#kv=" + kv + "&kv_replay=" + replay
}

// TestTwoRoutersAgree: two `warden route`s in front of the same two
// engines, which publish KV events; eight conversations of five turns, the
// client alternating between the routers turn by turn (each router sees
// every other turn of a conversation, and half the conversations' first
// turns), and one router restarted with no session table before the fourth
// round. Both routers send every follow-up turn to the engine its first
// turn went to, and it finds at least 80 % of its prompt cached.
func TestTwoRoutersAgree(t *testing.T) {
	var args []string
	for range 2 {
		args = append(args, "--replica", kvEngine(t))
	}
	args = append(args, "--state-file", "none", "--scrape-interval", "200ms")
	ports := []int{simproc.FreePort(t), simproc.FreePort(t)}
	a, b := startRoute(t, ports[0], args...), startRoute(t, ports[1], args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	turns, err := convtest.Play(ctx, convtest.Plan{Routers: []string{a.url, b.url}, Model: "test-model",
		Conversations: 8, Turns: 5, SystemWords: 400, FirstWords: 100, TurnWords: 30, MaxTokens: 16,
		BeforeRound: func(turn int) error {
			if turn == 4 {
				b.stop(t)
				b = startRoute(t, ports[1], args...)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	home := map[int]string{}
	served := map[string]int{}
	for _, tr := range turns {
		served[tr.Via]++
		if tr.Turn == 1 {
			home[tr.Conversation] = tr.Replica
			continue
		}
		if tr.Replica != home[tr.Conversation] {
			t.Errorf("conversation %d turn %d through %s on engine %s, its home is %s", tr.Conversation, tr.Turn, tr.Via,
				tr.Replica, home[tr.Conversation])
		}
		if tr.Cached*5 < tr.Prompt*4 {
			t.Errorf("conversation %d turn %d through %s: %d of %d prompt tokens cached, want at least 80 %%",
				tr.Conversation, tr.Turn, tr.Via, tr.Cached, tr.Prompt)
		}
	}
	if served[a.url] != 20 || served[b.url] != 20 {
		t.Errorf("turns per router: %v, want 20 each", served)
	}
}

// TestTwoRoutersBreakTiesAlike: a conversation whose first turn both
// engines hold in full (each router placed a copy of it on its own
// engine, as two routers may before any event arrives) is sent home by
// both routers to the same engine, the one with the smaller URL, whatever
// each router's own table says; once for a second turn through the first
// router, once (another conversation) through the second.
func TestTwoRoutersBreakTiesAlike(t *testing.T) {
	var args []string
	for range 2 {
		args = append(args, "--replica", kvEngine(t))
	}
	args = append(args, "--state-file", "none", "--scrape-interval", "200ms")
	a, b := startRoute(t, simproc.FreePort(t), args...), startRoute(t, simproc.FreePort(t), args...)
	st := a.status(t)
	smaller := 0
	if st.Replicas[1].URL < st.Replicas[0].URL {
		smaller = 1
	}
	system := strings.Repeat("Follow the rules of this repository. ", 100)
	send := func(w *wardenProc, session string, turns int, pin string) string {
		t.Helper()
		msgs := fmt.Sprintf(`{"role":"system","content":%q},{"role":"user","content":"first step of %s"}`, system, session)
		if turns == 2 {
			msgs += `,{"role":"assistant","content":"done"},{"role":"user","content":"next step"}`
		}
		hdr := map[string]string{"X-Session-Id": session}
		if pin != "" {
			hdr["X-Warden-Replica"] = pin
		}
		resp, body := post(t, w.url+"/v1/chat/completions", `{"model":"test-model","max_tokens":4,"messages":[`+msgs+`]}`, hdr)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", session, resp.StatusCode, body)
		}
		return resp.Header.Get("X-Warden-Replica")
	}
	for _, session := range []string{"tie-a", "tie-b"} {
		send(a, session, 1, "0") // router a's table: home 0
		send(b, session, 1, "1") // router b's table: home 1; both engines hold the same chain
	}
	for _, w := range []*wardenProc{a, b} {
		simproc.Poll(t, "both routers' ledgers hold both conversations on both engines", func() bool {
			st := w.status(t)
			return st.Replicas[0].LedgerConversations == 2 && st.Replicas[1].LedgerConversations == 2
		})
	}
	want := strconv.Itoa(smaller)
	if got := send(a, "tie-a", 2, ""); got != want {
		t.Errorf("through router a (its home 0): turn 2 on engine %s, want %s (the smaller URL)", got, want)
	}
	if got := send(b, "tie-b", 2, ""); got != want {
		t.Errorf("through router b (its home 1): turn 2 on engine %s, want %s (the smaller URL)", got, want)
	}
}
