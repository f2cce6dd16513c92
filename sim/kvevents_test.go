package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/kvevents"
)

// `warden sim serve --kv-events-config` publishing over real sockets to kvevents.Subscribe.
// Waits are bounded by a generous deadline that fails the test; nothing is timed.

// events collects what a subscriber delivers.
type events struct {
	mu      sync.Mutex
	updates []kvevents.Update
	caught  chan struct{}
}

func subscribeSim(t *testing.T, cfg kvevents.SubscriberConfig) *events {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ev := &events{caught: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := kvevents.Subscribe(ctx, cfg, func(u kvevents.Update) {
			if u.CaughtUp {
				close(ev.caught)
			}
			ev.mu.Lock()
			ev.updates = append(ev.updates, u)
			ev.mu.Unlock()
		})
		if err != nil {
			t.Errorf("Subscribe: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ev.caught:
	case <-time.After(30 * time.Second):
		t.Fatal("subscriber never caught up")
	}
	return ev
}

// all returns the events received so far, in order.
func (e *events) all() []kvevents.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []kvevents.Event
	for _, u := range e.updates {
		if u.Batch != nil {
			out = append(out, u.Batch.Events...)
		}
	}
	return out
}

func (e *events) batches() []kvevents.Batch {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []kvevents.Batch
	for _, u := range e.updates {
		if u.Batch != nil {
			out = append(out, *u.Batch)
		}
	}
	return out
}

// waitFor polls until cond holds on the events received (bounded).
func (e *events) waitFor(t *testing.T, what string, cond func([]kvevents.Event) bool) []kvevents.Event {
	t.Helper()
	var evs []kvevents.Event
	simproc.Poll(t, what, func() bool { evs = e.all(); return cond(evs) })
	return evs
}

func (e *events) gaps() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, u := range e.updates {
		if u.Gap != nil || u.Restarted {
			n++
		}
	}
	return n
}

func storedBy(evs []kvevents.Event, session string) []kvevents.Event {
	var out []kvevents.Event
	for _, ev := range evs {
		if ev.Kind == kvevents.KindStored && ev.SessionID == session {
			out = append(out, ev)
		}
	}
	return out
}

func count(evs []kvevents.Event, k kvevents.Kind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func ipcEndpoints(t *testing.T) (pub, replay string) {
	dir, err := os.MkdirTemp("", "simkv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return "ipc://" + filepath.Join(dir, "ev"), "ipc://" + filepath.Join(dir, "replay")
}

func kvConfig(pub, replay string) string {
	b, _ := json.Marshal(map[string]any{"enable_kv_cache_events": true, "publisher": "zmq",
		"endpoint": pub, "replay_endpoint": replay, "topic": "kv@sim"})
	return string(b)
}

// chat posts a chat completion with extra body fields and headers; it returns the
// prompt's token count.
func chat(t *testing.T, url, content string, gen int, extra map[string]any, headers map[string]string) int {
	t.Helper()
	body := chatBody([]map[string]any{msg("user", content)}, gen)
	for k, v := range extra {
		body[k] = v
	}
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	return int(parse(b).Get("usage.prompt_tokens").Int())
}

func TestKVEventsCarrySessionsAndFullReports(t *testing.T) {
	pub, replay := ipcEndpoints(t)
	p := simproc.Start(t, "--sim-time-scale", fast, "--kv-events-config", kvConfig(pub, replay))
	ev := subscribeSim(t, kvevents.SubscriberConfig{Endpoint: pub, Replay: replay, Topic: "kv@sim"})
	text := words("session", 300)

	// Turn 1, named by the header: its prompt and generated blocks, one chain from a null parent.
	const gen = 40
	prompt := chat(t, p.URL, text, gen, nil, map[string]string{"X-Session-ID": "hdr-1"})
	full := (prompt + gen - 1) / 16 // the last generated token has no KV yet
	var first []kvevents.Event
	ev.waitFor(t, "turn 1's blocks", func(evs []kvevents.Event) bool {
		first = storedBy(evs, "hdr-1")
		return hashCount(first) >= full
	})
	chain := checkChain(t, first)
	if len(chain) != full || first[0].Tokens != 16*len(first[0].Hashes) || first[0].BlockSize != 16 || first[0].Medium != "GPU" {
		t.Errorf("turn 1 stored %d blocks (first event %+v), want %d of 16 tokens on GPU, generated ones included", len(chain), first[0], full)
	}

	// The body's session_id wins over the header.
	chat(t, p.URL, text, gen, map[string]any{"session_id": "body-1"}, map[string]string{"X-Session-ID": "hdr-ignored"})
	ev.waitFor(t, "turn 2's blocks under the body's session id", func(evs []kvevents.Event) bool { return len(storedBy(evs, "body-1")) > 0 })
	if n := len(storedBy(ev.all(), "hdr-ignored")); n != 0 {
		t.Errorf("%d events carry the header's session id, want the body's", n)
	}

	// The full report re-reports the prefix hit whole: parent null, from the chain's start.
	chat(t, p.URL, text, 1, map[string]any{"vllm_xargs": map[string]any{"kv_cache_report_mode": "full"}},
		map[string]string{"X-Session-ID": "full-1"})
	hit := (prompt - 1) / 16
	var report []kvevents.Event
	ev.waitFor(t, "the full report", func(evs []kvevents.Event) bool { report = storedBy(evs, "full-1"); return len(report) > 0 })
	r := report[0]
	if r.HasParent || len(r.Hashes) != hit || r.Tokens != 16*hit || fmt.Sprint(r.Hashes) != fmt.Sprint(chain[:hit]) {
		t.Errorf("full report %+v, want the first %d blocks of turn 1's chain %v with a null parent", r, hit, chain[:hit])
	}
	if n := ev.gaps(); n != 0 {
		t.Errorf("%d gaps or restarts", n)
	}
}

func hashCount(evs []kvevents.Event) int {
	n := 0
	for _, e := range evs {
		n += len(e.Hashes)
	}
	return n
}

// checkChain checks that stored events extend one chain (each parent the previous event's
// last hash, the first parent null) and returns its hashes.
func checkChain(t *testing.T, evs []kvevents.Event) []uint64 {
	t.Helper()
	var chain []uint64
	for i, e := range evs {
		switch {
		case i == 0 && e.HasParent:
			t.Errorf("the first event has parent %x, want null", e.Parent)
		case i > 0 && (!e.HasParent || e.Parent != chain[len(chain)-1]):
			t.Errorf("event %d has parent %x (set %v), want %x", i, e.Parent, e.HasParent, chain[len(chain)-1])
		}
		chain = append(chain, e.Hashes...)
	}
	return chain
}

func TestKVEventsEvictionAndReset(t *testing.T) {
	t.Setenv("VLLM_SERVER_DEV_MODE", "1")
	pub, replay := ipcEndpoints(t)
	p := simproc.Start(t, "--sim-time-scale", fast, "--sim-kv-tokens", "1024", "--kv-events-config", kvConfig(pub, replay))
	ev := subscribeSim(t, kvevents.SubscriberConfig{Endpoint: pub, Replay: replay, Topic: "kv@sim"})
	for i := range 6 {
		chat(t, p.URL, words(fmt.Sprint("evict", i), 350), 8, nil, nil)
	}
	evs := ev.waitFor(t, "removals", func(evs []kvevents.Event) bool { return count(evs, kvevents.KindRemoved) > 0 })
	stored := map[uint64]bool{}
	for _, e := range evs {
		if e.Kind == kvevents.KindStored {
			for _, h := range e.Hashes {
				stored[h] = true
			}
		}
		if e.Kind == kvevents.KindRemoved {
			if len(e.Hashes) != 1 || !stored[e.Hashes[0]] || e.Medium != "GPU" {
				t.Fatalf("removal %+v: want one GPU hash stored before", e)
			}
		}
	}
	code, _ := post(t, p.URL+"/reset_prefix_cache", "")
	if code != 200 {
		t.Fatalf("reset: %d", code)
	}
	// As vLLM, the reset's event goes out with the next step's: a request makes one.
	chat(t, p.URL, "after the reset", 2, nil, nil)
	ev.waitFor(t, "AllBlocksCleared", func(evs []kvevents.Event) bool { return count(evs, kvevents.KindCleared) == 1 })
}

// freePair finds a port p with p+1 free as well (both bound and released).
func freePair(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := simproc.FreePort(t)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

func TestKVEventsPerDataParallelRank(t *testing.T) {
	// A plain tcp://127.0.0.1:P makes each engine connect out to P+rank (the subscribers
	// bind them); the replay endpoints are bound at R+rank.
	pubPort, repPort := freePair(t), freePair(t)
	cfg := kvConfig(fmt.Sprintf("tcp://127.0.0.1:%d", pubPort), fmt.Sprintf("tcp://127.0.0.1:%d", repPort))
	var subs []*events
	for rank := range 2 {
		subs = append(subs, subscribeSim(t, kvevents.SubscriberConfig{
			Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pubPort+rank), Bind: true,
			Replay: fmt.Sprintf("tcp://127.0.0.1:%d", repPort+rank), ReplayTimeout: time.Second}))
	}
	p := simproc.Start(t, "--sim-time-scale", fast, "--data-parallel-size", "2", "--kv-events-config", cfg)
	for rank := range 2 {
		chat(t, p.URL, words(fmt.Sprint("rank", rank), 100), 4, nil,
			map[string]string{"X-data-parallel-rank": fmt.Sprint(rank), "X-Session-ID": fmt.Sprint("on-", rank)})
	}
	for rank, s := range subs {
		s.waitFor(t, fmt.Sprint("rank ", rank, "'s events"), func(evs []kvevents.Event) bool {
			return len(storedBy(evs, fmt.Sprint("on-", rank))) > 0
		})
		if n := len(storedBy(s.all(), fmt.Sprint("on-", 1-rank))); n != 0 {
			t.Errorf("rank %d published %d events of the other rank's request", rank, n)
		}
		for _, b := range s.batches() {
			if !b.HasRank || b.Rank != rank {
				t.Fatalf("rank %d's subscriber got a batch of rank %d (has %v)", rank, b.Rank, b.HasRank)
			}
		}
	}
}

func TestKVEventsOfTheHostTier(t *testing.T) {
	pub, replay := ipcEndpoints(t)
	// 0.3 GiB of host tier: 136 blocks of 2.25 MiB, less than the four prompts: it evicts too.
	p := simproc.Start(t, "--sim-time-scale", fast, "--sim-kv-tokens", "4096",
		"--kv-offloading-backend", "native", "--kv-offloading-size", "0.3", "--kv-events-config", kvConfig(pub, replay))
	ev := subscribeSim(t, kvevents.SubscriberConfig{Endpoint: pub, Replay: replay, Topic: "kv@sim"})
	for i := range 4 {
		chat(t, p.URL, words(fmt.Sprint("host", i), 1500), 16, nil, map[string]string{"X-Session-ID": "h"})
	}
	evs := ev.waitFor(t, "CPU stores and evictions", func(evs []kvevents.Event) bool {
		var stored, removed bool
		for _, e := range evs {
			stored = stored || (e.Kind == kvevents.KindStored && e.Medium == "CPU")
			removed = removed || (e.Kind == kvevents.KindRemoved && e.Medium == "CPU")
		}
		return stored && removed
	})
	gpu := map[uint64]bool{}
	for _, e := range evs {
		if e.Kind == kvevents.KindStored && e.Medium == "GPU" {
			for _, h := range e.Hashes {
				gpu[h] = true
			}
		}
		if e.Kind == kvevents.KindStored && e.Medium == "CPU" {
			if len(e.Hashes) != 1 || e.SessionID != "" || e.Tokens != 16 || !gpu[e.Hashes[0]] {
				t.Fatalf("CPU store %+v: want one block of 16 tokens first stored on the GPU, no session id", e)
			}
		}
	}
}
