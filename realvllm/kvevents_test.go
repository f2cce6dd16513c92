package realvllm_test

// vLLM 0.32's KV-cache events on its CPU build, read with package kvevents: one
// `vllm serve --kv-events-config` for the whole test (a start costs 1-2 minutes here).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/kvevents"
)

// kvSub collects what one kvevents.Subscribe delivers.
type kvSub struct {
	mu      sync.Mutex
	updates []kvevents.Update
	caught  chan struct{}
}

func kvSubscribe(t *testing.T, cfg kvevents.SubscriberConfig) *kvSub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &kvSub{caught: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := kvevents.Subscribe(ctx, cfg, func(u kvevents.Update) {
			s.mu.Lock()
			s.updates = append(s.updates, u)
			s.mu.Unlock()
			if u.CaughtUp {
				close(s.caught)
			}
		}); err != nil {
			t.Errorf("Subscribe: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.caught:
	case <-time.After(time.Minute):
		t.Fatal("the subscriber never caught up")
	}
	return s
}

func (s *kvSub) snapshot() []kvevents.Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]kvevents.Update(nil), s.updates...)
}

func (s *kvSub) events() []kvevents.Event {
	var out []kvevents.Event
	for _, u := range s.snapshot() {
		if u.Batch != nil {
			out = append(out, u.Batch.Events...)
		}
	}
	return out
}

func sessionStored(evs []kvevents.Event, session string) []kvevents.Event {
	var out []kvevents.Event
	for _, e := range evs {
		if e.Kind == kvevents.KindStored && e.SessionID == session {
			out = append(out, e)
		}
	}
	return out
}

func blocksIn(evs []kvevents.Event) (hashes []uint64) {
	for _, e := range evs {
		hashes = append(hashes, e.Hashes...)
	}
	return hashes
}

func TestKVEventsFromRealVLLM(t *testing.T) {
	needEngine(t)
	dir, err := os.MkdirTemp("", "kvev") // short: unix socket paths are limited to ~108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil { // the events carry the prompts' token ids
		t.Fatal(err)
	}
	pub := "ipc://" + filepath.Join(dir, "ev")                       // ipc: the engine binds
	replay := fmt.Sprintf("tcp://127.0.0.1:%d", simproc.FreePort(t)) // bound exactly as written: loopback only
	cfg, _ := json.Marshal(map[string]any{"enable_kv_cache_events": true, "publisher": "zmq",
		"endpoint": pub, "replay_endpoint": replay, "topic": "kv@tiny"})
	v := runVLLMDP(t, 1, 0, 1, false, "--num-gpu-blocks-override", "64", "--max-model-len", "2016",
		"--gpu-memory-utilization", "0.3", "--kv-events-config", string(cfg))
	v.waitHealthy(t, 1)
	live := kvSubscribe(t, kvevents.SubscriberConfig{Endpoint: pub, Replay: replay, Topic: "kv@tiny"})

	// Turn 1, named by the header.
	const gen = 40
	system := words("system", 500)
	turn1 := msgs("system", system, "user", words("question", 60))
	_, r1 := post(t, v.url+"/v1/chat/completions",
		`{"model":"tiny","messages":`+turn1+`,"max_tokens":40,"ignore_eos":true}`, "X-Session-ID", "s-hdr")
	prompt1 := int(jsonGet(r1, "usage.prompt_tokens").Int())
	want1 := (prompt1 + gen - 1) / 32
	var first []kvevents.Event
	eventually(t, time.Minute, "turn 1's BlockStored events", func() bool {
		first = sessionStored(live.events(), "s-hdr")
		return len(blocksIn(first)) >= prompt1/32
	})
	time.Sleep(2 * time.Second) // late generated blocks, if any (observation, not an assertion)
	first = sessionStored(live.events(), "s-hdr")
	chain := blocksIn(first)
	t.Logf("turn 1: prompt %d tokens, %d BlockStored events, %d blocks (prompt-only would be %d, with generated %d); first %+v",
		prompt1, len(first), len(chain), prompt1/32, want1, brief(first[0]))
	if first[0].HasParent || first[0].Medium != "GPU" || first[0].BlockSize != 32 || first[0].Tokens != 32*len(first[0].Hashes) {
		t.Errorf("turn 1's first event %+v: want a null parent, GPU, 32-token blocks", brief(first[0]))
	}

	// Turn 2 reuses turn 1's prefix, in the full report mode, named in the body.
	turn2 := msgs("system", system, "user", words("question", 60), "assistant", jsonGet(r1, "choices.0.message.content").String(),
		"user", words("followup", 40))
	_, r2 := post(t, v.url+"/v1/chat/completions", `{"model":"tiny","messages":`+turn2+
		`,"max_tokens":8,"ignore_eos":true,"session_id":"s-full","vllm_xargs":{"kv_cache_report_mode":"full"}}`, "X-Session-ID", "ignored")
	var full []kvevents.Event
	eventually(t, time.Minute, "turn 2's events", func() bool { full = sessionStored(live.events(), "s-full"); return len(full) >= 2 })
	t.Logf("turn 2 (full report): prompt %d, cached %d; events %v", jsonGet(r2, "usage.prompt_tokens").Int(),
		jsonGet(r2, "usage.prompt_tokens_details.cached_tokens").Int(), briefs(full))
	rep := full[0]
	if rep.HasParent || len(rep.Hashes) == 0 || fmt.Sprint(rep.Hashes) != fmt.Sprint(chain[:len(rep.Hashes)]) {
		t.Errorf("the full report %+v: want turn 1's chain from its start with a null parent", brief(rep))
	}
	if n := len(sessionStored(live.events(), "ignored")); n != 0 {
		t.Errorf("%d events carry the header's session id though the body named one", n)
	}

	// Turn 2 again, incremental (the default): is the reused prefix reported?
	_, _ = post(t, v.url+"/v1/chat/completions", `{"model":"tiny","messages":`+turn2+`,"max_tokens":8,"ignore_eos":true}`,
		"X-Session-ID", "s-plain")
	time.Sleep(2 * time.Second)
	t.Logf("turn 2 repeated, incremental: events %v", briefs(sessionStored(live.events(), "s-plain")))

	// A late subscriber catches up through replay, from sequence 0.
	late := kvSubscribe(t, kvevents.SubscriberConfig{Endpoint: pub, Replay: replay, Topic: "kv@tiny"})
	before := late.snapshot()
	if len(before) < 2 || before[0].Batch == nil || before[0].Batch.Seq != 0 {
		t.Fatalf("the late subscriber's first update %+v: want the batch of sequence 0 from replay", before[0])
	}
	if got := len(sessionStored(late.events(), "s-hdr")); got != len(first) {
		t.Errorf("replay gave %d of turn 1's %d events", got, len(first))
	}
	checkRawHashes(t, replay)

	// Eviction: six prompts of ~800 tokens on 64 blocks of 32.
	for i := range 6 { // ~3 tokens a word
		resp, body := post(t, v.url+"/v1/chat/completions", chat(msgs("user", words(fmt.Sprint("evict", i), 260)), ""))
		if resp.StatusCode != 200 {
			t.Fatalf("eviction prompt %d: %s %s", i, resp.Status, body)
		}
	}
	var removed []kvevents.Event
	eventually(t, time.Minute, "BlockRemoved events", func() bool {
		removed = nil
		for _, e := range live.events() {
			if e.Kind == kvevents.KindRemoved {
				removed = append(removed, e)
			}
		}
		return len(removed) > 0
	})
	t.Logf("%d BlockRemoved events; first %+v", len(removed), brief(removed[0]))

	// Reset: AllBlocksCleared, published with the next step's events (a request makes one).
	if resp, body := post(t, v.url+"/reset_prefix_cache", ""); resp.StatusCode != 200 {
		t.Fatalf("reset_prefix_cache: %s %s", resp.Status, body)
	}
	post(t, v.url+"/v1/chat/completions", chat(msgs("user", "after the reset"), ""))
	eventually(t, time.Minute, "AllBlocksCleared", func() bool {
		for _, e := range live.events() {
			if e.Kind == kvevents.KindCleared {
				return true
			}
		}
		return false
	})
	for _, u := range live.snapshot() {
		if u.Gap != nil || u.Restarted {
			t.Errorf("live subscriber: %+v", u)
		}
	}
	b := live.snapshot()[1].Batch
	t.Logf("batch header: seq %d rank %d (has %v) ts %.3f", b.Seq, b.Rank, b.HasRank, b.Time)
}

// checkRawHashes asks replay for batch 0 by hand and logs how its first hash travels
// (msgpack int or bytes): the default VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 sends ints.
func checkRawHashes(t *testing.T, replay string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(replay); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
		t.Fatal(err)
	}
	m, err := d.Recv()
	if err != nil || len(m.Frames) != 4 {
		t.Fatalf("replay answer %v, %v", m.Frames, err)
	}
	var batch []any
	if err := msgpack.Unmarshal(m.Frames[3], &batch); err != nil {
		t.Fatal(err)
	}
	evs, _ := batch[1].([]any)
	if len(evs) == 0 {
		t.Fatalf("batch 0 %v has no events", batch)
	}
	ev, _ := evs[0].(map[string]any)
	hs, _ := ev["block_hashes"].([]any)
	t.Logf("raw batch 0: %d fields, event keys %v, first hash %T %v", len(batch), keys(ev), hs[0], hs[0])
	switch hs[0].(type) {
	case []byte, string:
		t.Errorf("block hashes travel as bytes; want ints (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES defaults to 1)")
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

type briefEvent struct {
	Kind    string
	Blocks  int
	Parent  string
	Tokens  int
	Medium  string
	Session string
}

func brief(e kvevents.Event) briefEvent {
	p := "null"
	if e.HasParent {
		p = fmt.Sprintf("%x", e.Parent)
	}
	return briefEvent{e.Kind.String(), len(e.Hashes), p, e.Tokens, e.Medium, e.SessionID}
}

func briefs(evs []kvevents.Event) []briefEvent {
	out := make([]briefEvent, len(evs))
	for i, e := range evs {
		out[i] = brief(e)
	}
	return out
}
