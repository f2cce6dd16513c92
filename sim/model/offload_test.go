package model

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// evictedConversation runs conversation A's first turn (10,000 prompt
// tokens, 16 out), then B and C (10,000 each) through a 16k-token GPU
// cache, which evicts all of A, then A's second turn (its history + 400
// new tokens). It returns the engine and A's second turn.
func evictedConversation(t *testing.T, hostGiB float64) (*vEngine, *Seq, Counters) {
	t.Helper()
	p := Profiles[DefaultProfile]
	v := newVEngine(a4000Sched(p, 1000, hostGiB), p)
	a1 := NewSeq(1, tokens(1, 10000), 16, 16)
	for i, q := range []*Seq{a1, NewSeq(2, tokens(2, 10000), 16, 16), NewSeq(3, tokens(3, 10000), 16, 16)} {
		v.add(q)
		v.drain()
		v.t += 1 // a think time: every transfer has completed
		if i == 0 && v.s.Pool().NumCached() == 0 {
			t.Fatal("turn 1 left nothing cached")
		}
	}
	before := v.s.Counters
	a2 := NewSeq(4, append(slices.Clone(a1.Tokens), tokens(4, 400)...), 16, 16)
	v.add(a2)
	return v, a2, before
}

// TestHostTierServesEvictedConversation: a conversation whose history others
// evicted from the GPU but the host tier kept is served on its next turn
// with the tier's blocks loaded, not recomputed: usage cached_tokens and the
// external counters count them, the request waits without computing while
// the load runs, and its TTFT is the transfer plus one 416-token step, far
// below the re-prefill's.
func TestHostTierServesEvictedConversation(t *testing.T) {
	p := Profiles[DefaultProfile]
	v, a2, before := evictedConversation(t, 8)
	if !v.s.HasHostTier() || v.s.host.pool.cap != 3640 { // 8 GiB / 2.25 MiB
		t.Fatalf("host tier of %v blocks, want 3640", v.s.HostSnapshot().Blocks)
	}
	v.step() // admission: the load starts, nothing is computed
	if !a2.host.loading || v.s.NumRunning() != 0 || v.s.NumWaiting() != 1 {
		t.Fatalf("after admission: loading %v, running %d, waiting %d; want loading, 0, 1", a2.host.loading, v.s.NumRunning(), v.s.NumWaiting())
	}
	if hs := v.s.HostSnapshot(); hs.FetchRunning != 1 || hs.UsagePerc == 0 {
		t.Errorf("during the load: %+v, want one fetch in progress and pinned blocks", hs)
	}
	v.drain()
	d := v.s.Counters
	const history = 10000 // turn 1's prompt: its 625 full blocks; its output was not stored (prompt only)
	if a2.CachedTokens != history {
		t.Errorf("cached_tokens = %d, want %d (loaded from the host tier)", a2.CachedTokens, history)
	}
	if got := d.PrefixHits - before.PrefixHits; got != 0 {
		t.Errorf("GPU prefix hits %d, want 0 (A was evicted)", got)
	}
	if got, want := d.PrefixQueries-before.PrefixQueries, int64(a2.NumPrompt); got != want {
		t.Errorf("GPU prefix queries %d, want %d", got, want)
	}
	if q, h := d.ExternalQueries-before.ExternalQueries, d.ExternalHits-before.ExternalHits; q != 10416 || h != history {
		t.Errorf("external queries/hits %d/%d, want 10416/%d", q, h, history)
	}
	if got, want := d.HostLoadBytes-before.HostLoadBytes, int64(625*16*147456); got != want {
		t.Errorf("load bytes %d, want %d", got, want)
	}
	transfer := p.HostLinkLatency + 625*p.HostBlockSeconds(16)
	n := 416.0
	want := transfer + p.StepSeconds(StepCost{PrefillTokens: 416, PrefillPosSum: n*history + n*(n-1)/2})
	if got := v.ttft(a2); math.Abs(got-want) > 1e-9 {
		t.Errorf("TTFT %.4f s, want the transfer %.4f s + one 416-token step = %.4f s", got, transfer, want)
	}
	off, a2off, _ := evictedConversation(t, 0)
	off.drain()
	if a2off.CachedTokens != 0 {
		t.Fatalf("without the tier cached_tokens = %d, want 0", a2off.CachedTokens)
	}
	if got, re := v.ttft(a2), off.ttft(a2off); got > re/5 {
		t.Errorf("TTFT with the tier %.3f s, re-prefill %.3f s: want the reload far below", got, re)
	} else {
		t.Logf("TTFT: reload %.3f s (transfer %.3f s), re-prefill %.3f s", got, transfer, re)
	}
}

// TestHostPoolLRU: a full host pool evicts its least recently used blocks
// (a finished request touches the blocks it stored or found), and a
// request's deepest blocks before its first (it touches them tail first, so
// its first block is the most recent).
func TestHostPoolLRU(t *testing.T) {
	v := smallSched(100, 6, 1e-3)
	a, b := NewSeq(1, tokens(1, 13), 1, 4), NewSeq(2, tokens(2, 13), 1, 4) // 3 full blocks each
	run(v, a)
	if diff := cmp.Diff([]bool{true, true, true}, hostHas(v.s, a)); diff != "" {
		t.Fatalf("a's prompt blocks stored as computed (-want +got):\n%s", diff)
	}
	run(v, b) // fills the pool
	// a again: all on the GPU; its blocks are offered, found in host
	// memory, and touched when it finishes: b is now the least recent.
	run(v, NewSeq(3, tokens(1, 13), 1, 4))
	c := NewSeq(4, tokens(3, 9), 1, 4) // 2 blocks: evicts b's two deepest
	run(v, c)
	for _, tc := range []struct {
		name string
		q    *Seq
		want []bool
	}{{"a, used last", a, []bool{true, true, true}}, {"b, least recent", b, []bool{true, false, false}}, {"c", c, []bool{true, true}}} {
		if diff := cmp.Diff(tc.want, hostHas(v.s, tc.q)); diff != "" {
			t.Errorf("%s in host memory (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := len(v.s.host.pool.chunks); got != 6 {
		t.Errorf("host pool holds %d blocks, want its 6", got)
	}
	// b again with its GPU blocks gone: only its first block loads.
	if !v.s.Pool().Reset() {
		t.Fatal("GPU reset refused")
	}
	b2 := NewSeq(5, tokens(2, 13), 1, 4)
	run(v, b2)
	if b2.CachedTokens != 4 {
		t.Errorf("b again: cached %d, want its first block's 4 (the run of host blocks)", b2.CachedTokens)
	}
}

// TestHostTierStoresPromptBlocksOnly: output blocks are not stored
// (offload_prompt_only), so the next turn loads the previous prompt only.
func TestHostTierStoresPromptBlocksOnly(t *testing.T) {
	v := smallSched(100, 50, 1e-3)
	a := NewSeq(1, tokens(1, 16), 9, 4) // 4 prompt blocks, then 9 output tokens (2 more full blocks)
	run(v, a)
	if got := len(v.s.host.pool.chunks); got != 4 {
		t.Errorf("host holds %d blocks, want the 4 prompt blocks", got)
	}
	if !v.s.Pool().Reset() {
		t.Fatal("GPU reset refused")
	}
	next := NewSeq(2, append(slices.Clone(a.Tokens), tokens(2, 5)...), 1, 4)
	run(v, next)
	if next.CachedTokens != 16 || v.s.Counters.ExternalHits != 16 {
		t.Errorf("next turn cached %d, external hits %d: want the 16 prompt tokens", next.CachedTokens, v.s.Counters.ExternalHits)
	}
}

// TestHostTierOneLoadAtATime: two requests missing the same prefix on the
// GPU: the first loads it from the host, the second is skipped while that
// load runs (vLLM's _chunks_being_loaded) and then hits the loaded blocks on
// the GPU. The head that waits does not block the queue.
func TestHostTierOneLoadAtATime(t *testing.T) {
	v := smallSched(100, 50, 0.01)
	a := NewSeq(1, tokens(1, 40), 1, 4)
	run(v, a)
	if !v.s.Pool().Reset() {
		t.Fatal("GPU reset refused")
	}
	before := v.s.Counters
	x := NewSeq(2, append(tokens(1, 40), tokens(5, 8)...), 1, 4)
	y := NewSeq(3, append(tokens(1, 40), tokens(6, 8)...), 1, 4)
	z := NewSeq(4, tokens(7, 8), 1, 4) // behind y: admitted while y waits
	v.add(x)
	v.add(y)
	v.add(z)
	v.step()
	if !x.host.loading || y.CachedTokens >= 0 || z.CachedTokens != 0 {
		t.Fatalf("first step: x loading %v, y cached %d, z cached %d; want x loading, y skipped, z admitted", x.host.loading, y.CachedTokens, z.CachedTokens)
	}
	v.drain()
	c := v.s.Counters
	if x.CachedTokens != 40 || y.CachedTokens != 40 {
		t.Errorf("cached x %d y %d, want 40 each", x.CachedTokens, y.CachedTokens)
	}
	c.ExternalHits -= before.ExternalHits
	c.ExternalQueries -= before.ExternalQueries
	c.PrefixHits -= before.PrefixHits
	if c.ExternalHits != 40 || c.PrefixHits != 40 {
		t.Errorf("external hits %d, GPU hits %d: want x's 40 from the host, y's 40 from the GPU", c.ExternalHits, c.PrefixHits)
	}
	if want := int64(len(x.Tokens)-x.Output) + int64(len(y.Tokens)-y.Output-40) + int64(len(z.Tokens)-z.Output); c.ExternalQueries != want {
		t.Errorf("external queries %d, want %d (tokens less the GPU hit)", c.ExternalQueries, want)
	}
}

// TestHostTierFullPromptHit: a prompt whose blocks are all in host memory
// loads all of them (the connector's hit is not capped at the last token),
// then recomputes the last token, and reports the whole prompt cached.
func TestHostTierFullPromptHit(t *testing.T) {
	v := smallSched(100, 50, 1e-3)
	run(v, NewSeq(1, tokens(1, 16), 1, 4))
	if !v.s.Pool().Reset() {
		t.Fatal("GPU reset refused")
	}
	q := NewSeq(2, tokens(1, 16), 1, 4)
	n := len(v.steps)
	v.add(q)
	v.drain()
	if diff := cmp.Diff([]StepCost{{PrefillTokens: 1, PrefillPosSum: 15}}, v.steps[n:]); diff != "" {
		t.Errorf("steps after the load (-want +got):\n%s", diff)
	}
	if q.CachedTokens != 16 {
		t.Errorf("cached %d, want 16", q.CachedTokens)
	}
}

// TestHostTierUnusedChangesNothing: with a tier that never serves a hit (the
// GPU cache holds everything), every step, first-token time and counter is
// what the scheduler computes without it.
func TestHostTierUnusedChangesNothing(t *testing.T) {
	p := Profiles[ReferenceProfile]
	runIt := func(hostGiB float64) (*vEngine, []float64, Counters) {
		v := newVEngine(a4000Sched(p, 2400, hostGiB), p)
		sys := tokens(9, 3500)
		var turns []*Seq
		v.done = func(q *Seq) {
			if q.ID < 30 { // a next turn for each conversation
				nq := NewSeq(q.ID+10, append(slices.Clone(q.Tokens), tokens(int(q.ID)+100, 400)...), 64, 16)
				turns = append(turns, nq)
				v.add(nq)
			}
		}
		for i := 1; i <= 3; i++ {
			q := NewSeq(uint64(i), append(slices.Clone(sys), tokens(i, 3000)...), 64, 16)
			turns = append(turns, q)
			v.add(q)
		}
		v.drain()
		var ttft []float64
		for _, q := range turns {
			ttft = append(ttft, v.ttft(q), float64(q.CachedTokens))
		}
		return v, ttft, v.s.Counters
	}
	off, tOff, cOff := runIt(0)
	on, tOn, cOn := runIt(16)
	if diff := cmp.Diff(off.steps, on.steps); diff != "" {
		t.Errorf("steps differ (-off +on):\n%s", diff)
	}
	if diff := cmp.Diff(tOff, tOn); diff != "" {
		t.Errorf("TTFT and cached tokens differ (-off +on):\n%s", diff)
	}
	if cOn.ExternalHits != 0 || cOn.HostStoreBytes == 0 {
		t.Errorf("tier on: %d external hits, %d bytes stored; want 0 and some", cOn.ExternalHits, cOn.HostStoreBytes)
	}
	cOn.ExternalQueries, cOn.HostStoreBytes, cOn.HostStoreSeconds = 0, 0, 0
	if diff := cmp.Diff(cOff, cOn); diff != "" {
		t.Errorf("GPU counters differ (-off +on):\n%s", diff)
	}
}

// TestHostTierSize: the tier's blocks are the GiB over a block's KV bytes on
// all ranks (the size is the whole engine's), and the transfer of a block is
// each rank's share over its own link.
func TestHostTierSize(t *testing.T) {
	p := Profiles[DefaultProfile]
	h1 := HostTier(16, p, 16)
	h2 := HostTier(16, p.WithTP(2), 16)
	if h1.Blocks != 7281 || h2.Blocks != 7281 { // 16 GiB / (16 x 147,456 B)
		t.Errorf("16 GiB: %d blocks at TP 1, %d at TP 2; want 7281 both", h1.Blocks, h2.Blocks)
	}
	if math.Abs(h1.BlockSeconds-2*h2.BlockSeconds) > 1e-12 || math.Abs(h1.BlockSeconds-16*147456/25e9) > 1e-12 {
		t.Errorf("block transfer %.3g s at TP 1, %.3g s at TP 2", h1.BlockSeconds, h2.BlockSeconds)
	}
	if h := HostTier(0, p, 16); h.Blocks != 0 {
		t.Errorf("no size: %d blocks", h.Blocks)
	}
}

// TestOffloadTable prints docs/simulator.md's host-tier tables
// (WARDEN_OFFLOAD_TABLE=1 go test -run OffloadTable -v ./sim/).
func TestOffloadTable(t *testing.T) {
	if os.Getenv("WARDEN_OFFLOAD_TABLE") == "" {
		t.Skip("set WARDEN_OFFLOAD_TABLE=1 to print the tables")
	}
	var b strings.Builder
	b.WriteString("| profile | re-prefill (no cache) | reload from host | of which transfer | GPU hit |\n|---|---|---|---|---|\n")
	for _, name := range []string{DefaultProfile, ReferenceProfile} {
		p := Profiles[name]
		// a 10,000-token history and 400 new tokens, on an idle replica
		hist := tokens(1, 10000)
		ttft := func(mode string) float64 {
			v := newVEngine(a4000Sched(p, 2400, 16), p)
			run(v, NewSeq(1, hist, 1, 16))
			if mode != "gpu" {
				v.s.Pool().Reset()
			}
			if mode == "cold" {
				v.s.ResetHost()
			}
			q := NewSeq(2, append(slices.Clone(hist), tokens(2, 400)...), 1, 16)
			v.add(q)
			v.drain()
			return v.ttft(q)
		}
		fmt.Fprintf(&b, "| %s | %.2f s | %.3f s | %.3f s | %.3f s |\n", name, ttft("cold"), ttft("host"),
			p.HostLinkLatency+625*p.HostBlockSeconds(16), ttft("gpu"))
	}
	b.WriteString("\n| sessions (x4 over the rig) | host tier | turns | output tok/min | TTFT p50 | TTFT p95 | GPU hit % | host hit % | prompt tokens computed |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, sessions := range []int{4, 6, 8} {
		for _, gibs := range []float64{0, 4, 16} {
			r := benchLike(ReferenceProfile, sessions, gibs, 600)
			fmt.Fprintf(&b, "| %d (%d) | %s | %d | %.0f | %.2f s | %.2f s | %.1f | %.1f | %d |\n", sessions, 4*sessions,
				map[bool]string{true: fmt.Sprintf("%g GiB", gibs), false: "off"}[gibs > 0], r.turns, r.outPerMin, r.p50, r.p95, r.gpuHit, r.hostHit, r.recomputed)
		}
	}
	t.Log("\n" + b.String())
}

type benchResult struct {
	turns               int
	outPerMin, p50, p95 float64
	gpuHit, hostHit     float64
	recomputed          int64
}

// benchLike is warden bench's default load on one replica (a quarter of
// the reference rig): closed-loop sessions of a shared 3.5k system prompt,
// a unique 7.3k first message, then 5 more turns of 400 new tokens, 256
// output tokens a turn; a finished session is replaced by a new one. It
// runs for seconds of simulated time.
func benchLike(profile string, sessions int, hostGiB float64, seconds float64) benchResult {
	p := Profiles[profile]
	kv := p.KVTokens(0.92, 32, 16)
	v := newVEngine(a4000Sched(p, kv/16, hostGiB), p)
	sys := tokens(99, 3500)
	type sess struct{ id, turn int }
	next := 0
	owner := map[*Seq]*sess{}
	var r benchResult
	var ttfts []float64
	start := func(s *sess, ctx []uint32) {
		var prompt []uint32
		if s.turn == 0 {
			prompt = append(slices.Clone(sys), tokens(1000+s.id*10, 7300)...)
		} else {
			prompt = append(ctx, tokens(1000+s.id*10+s.turn, 400)...)
		}
		q := NewSeq(uint64(s.id*10+s.turn), prompt, 256, 16)
		owner[q] = s
		v.add(q)
	}
	newSession := func() {
		next++
		start(&sess{id: next}, nil)
	}
	v.done = func(q *Seq) {
		s := owner[q]
		delete(owner, q)
		if v.t > seconds {
			return
		}
		r.turns++
		ttfts = append(ttfts, v.ttft(q))
		r.outPerMin += float64(q.Output)
		r.recomputed += int64(q.NumPrompt - max(q.CachedTokens, 0))
		if s.turn == 5 {
			newSession()
			return
		}
		s.turn++
		start(s, slices.Clone(q.Tokens))
	}
	for i := 0; i < sessions; i++ {
		newSession()
	}
	for v.t <= seconds && v.step() {
	}
	c := v.s.Counters
	r.outPerMin /= seconds / 60
	sort.Float64s(ttfts)
	if n := len(ttfts); n > 0 {
		r.p50, r.p95 = ttfts[n/2], ttfts[min(n-1, n*95/100)]
	}
	r.gpuHit = 100 * float64(c.PrefixHits) / math.Max(1, float64(c.PrefixQueries))
	r.hostHit = 100 * float64(c.ExternalHits) / math.Max(1, float64(c.PrefixQueries))
	return r
}
