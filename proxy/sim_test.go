package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

func TestMain(m *testing.M) { simproc.Main(m) }

// startSims runs n simulator processes concurrently and returns them as
// backends (rank = index).
func startSims(t *testing.T, n int, args ...string) ([]*simproc.Proc, []router.Backend) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts simulator processes")
	}
	simproc.Binary(t) // build once before starting in parallel
	// The flags warden serve gives its engines, tool calling included (the
	// simulator refuses agents' tools without them, as vLLM does).
	args = append([]string{"--enable-prompt-tokens-details", "--max-num-seqs", "32", "--sim-time-scale", "100",
		"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}, args...)
	procs := make([]*simproc.Proc, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); procs[i] = simproc.StartNoWait(t, args...) }()
	}
	wg.Wait()
	var bs []router.Backend
	for i, p := range procs {
		if err := p.WaitHealthy(30e9); err != nil {
			t.Fatalf("sim %d: %v\n%s", i, err, p.Output())
		}
		bs = append(bs, router.Backend{Rank: i, URL: p.URL, MaxNumSeqs: 32})
	}
	return procs, bs
}

// words makes n deterministic pseudo-words (about n tokens on the sim).
func words(seed string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", seed, i%97)
	}
	return b.String()
}

// conversation is a chat client that replays its history every turn.
type conversation struct {
	id, url string
	body    string
}

func newConversation(url, id, system, first string) *conversation {
	b := `{"model":"test-model","max_tokens":16,"messages":[]}`
	b, _ = sjson.Set(b, "messages.-1", map[string]string{"role": "system", "content": system})
	b, _ = sjson.Set(b, "messages.-1", map[string]string{"role": "user", "content": first})
	return &conversation{id: id, url: url, body: b}
}

// turn sends the conversation, appends the answer and a new user message,
// and returns the replica, route and usage.
func (c *conversation) turn(t *testing.T, next string) (rank int, route string, prompt, cached int64) {
	t.Helper()
	resp, body := post(t, c.url+"/v1/chat/completions", c.body, "X-Claude-Code-Session-Id", c.id)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d: %s", c.id, resp.StatusCode, body)
	}
	answer := gjson.Get(body, "choices.0.message.content").Str
	c.body, _ = sjson.Set(c.body, "messages.-1", map[string]string{"role": "assistant", "content": answer})
	c.body, _ = sjson.Set(c.body, "messages.-1", map[string]string{"role": "user", "content": next})
	rank, _ = strconv.Atoi(resp.Header.Get(identity.PinHeader))
	return rank, resp.Header.Get(routeHeader), gjson.Get(body, "usage.prompt_tokens").Int(),
		gjson.Get(body, "usage.prompt_tokens_details.cached_tokens").Int()
}

func TestSimConversationStaysAndItsHitsRise(t *testing.T) {
	_, bs := startSims(t, 2)
	p, front := testProxyBackends(t, testConfig{}, bs)
	sys := words("sys", 400)
	c := newConversation(front.URL, "conv-a", sys, words("task", 300))
	home, route, prevPrompt, cached0 := c.turn(t, words("more", 50))
	if route != "new" || cached0 != 0 {
		t.Fatalf("first turn: route %s cached %d", route, cached0)
	}
	sumPrompt, sumCached, lastRate := prevPrompt, int64(0), 0.0
	for turn := 1; turn <= 3; turn++ {
		rank, route, prompt, cached := c.turn(t, words(fmt.Sprintf("t%d-", turn), 50))
		t.Logf("turn %d: replica %d %s, cached %d/%d", turn, rank, route, cached, prompt)
		if rank != home || route != "sticky" {
			t.Fatalf("turn %d went to replica %d (%s), home is %d", turn, rank, route, home)
		}
		if cached < prevPrompt-16 {
			t.Errorf("turn %d: cached %d < previous prompt %d less one block", turn, cached, prevPrompt)
		}
		sumPrompt, sumCached, prevPrompt = sumPrompt+prompt, sumCached+cached, prompt
		rate := float64(sumCached) / float64(sumPrompt)
		if rate <= lastRate {
			t.Errorf("turn %d: the conversation's hit rate %.2f did not rise from %.2f", turn, rate, lastRate)
		}
		lastRate = rate
	}
	settled(t, p)
	if st := coreOf(p).Status(); st.StickyShare != 1 || st.Replicas[home].Sticky != 3 || st.Totals.CachedTokens == 0 {
		t.Errorf("status: sticky share %v, sticky turns %d, cached %d", st.StickyShare, st.Replicas[home].Sticky, st.Totals.CachedTokens)
	}
	// Distinct conversations spread: the next one goes to the other replica.
	d := newConversation(front.URL, "conv-b", sys, words("other", 300))
	if rank, route, _, _ := d.turn(t, "x"); rank == home || route != "new" {
		t.Errorf("second conversation went to replica %d (%s), same as the first", rank, route)
	}
}

func TestSimDeadReplicaFailsOver(t *testing.T) {
	procs, bs := startSims(t, 2)
	p, front := testProxyBackends(t, testConfig{}, bs)
	c := newConversation(front.URL, "conv-f", words("sys", 100), words("task", 100))
	home, _, _, _ := c.turn(t, "next")
	procs[home].Kill()
	rank, route, _, _ := c.turn(t, "after the crash")
	if rank == home || route != "failover" {
		t.Fatalf("after home died: replica %d route %s", rank, route)
	}
	rank, route, _, cached := c.turn(t, "settled")
	if rank != 1-home || route != "sticky" || cached == 0 {
		t.Errorf("after failover: replica %d route %s cached %d; want the new home, sticky, cached", rank, route, cached)
	}
	settled(t, p)
	if st := coreOf(p).Status(); st.Replicas[home].Up || st.Replicas[1-home].Failover != 1 {
		t.Errorf("status: dead replica up=%v, failovers %d", st.Replicas[home].Up, st.Replicas[1-home].Failover)
	}
}

// claudeTurn is a Claude Code first turn: billing block, shared system
// prompt, a conversation's own first message.
func claudeTurn(billingSuffix, system, first string) string {
	b := `{"model":"test-model","max_tokens":8,"stream":true,"messages":[]}`
	b, _ = sjson.Set(b, "system", []map[string]string{
		{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332." + billingSuffix + "; cc_entrypoint=cli;"},
		{"type": "text", "text": system},
	})
	b, _ = sjson.Set(b, "messages.-1", map[string]string{"role": "user", "content": first})
	return b
}

func TestSimBillingStripGivesCrossConversationHits(t *testing.T) {
	system := words("claude", 1000)
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			_, bs := startSims(t, 1)
			p, front := testProxyBackends(t, testConfig{Proxy: Config{KeepBillingHeader: keep}}, bs)
			post(t, front.URL+"/v1/messages?beta=true", claudeTurn("0b8", system, words("one", 200)), "X-Claude-Code-Session-Id", "a")
			post(t, front.URL+"/v1/messages?beta=true", claudeTurn("1c9", system, words("two", 200)), "X-Claude-Code-Session-Id", "b")
			settled(t, p)
			cached := coreOf(p).Status().Totals.CachedTokens
			t.Logf("keep billing header=%v: cached tokens on the second conversation's first turn: %d", keep, cached)
			if !keep && cached < 900 {
				t.Errorf("with the billing block removed the shared system prompt should hit: cached %d", cached)
			}
			if keep && cached > 100 {
				t.Errorf("with the billing block kept nothing should hit: cached %d", cached)
			}
		})
	}
}

func TestSimOffSpreadsByQueueAndStickyKeepsTheCache(t *testing.T) {
	_, bs := startSims(t, 4)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)} // frozen: one balancer stats period
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicyOff, Clock: clk.now}}, bs)
	c := newConversation(front.URL, "conv-off", words("sys", 200), words("task", 200))
	var got []string
	for turn := range 4 {
		rank, route, _, cached := c.turn(t, words(fmt.Sprintf("t%d-", turn), 30))
		got = append(got, fmt.Sprintf("%d:%s:%d", rank, route, cached))
	}
	// Each request sent counts as waiting (+4) until the next stats refresh,
	// so vLLM's balancer walks the replicas: no turn finds its prefix.
	if want := "[0:off:0 1:off:0 2:off:0 3:off:0]"; fmt.Sprint(got) != want {
		t.Errorf("off: %v, want %s", got, want)
	}
	if _, err := coreOf(p).SetPolicy(place.PolicySticky); err != nil {
		t.Fatal(err)
	}
	rank, route, _, cached := c.turn(t, "back home")
	if rank != 0 || route != "sticky" || cached < 200 {
		t.Errorf("sticky after off: replica %d %s cached %d; want home 0 (first placement) with its cached prefix", rank, route, cached)
	}
}
