package serve

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/router/decision"
)

// TestFairShareFarm measures a farm's fair share (docs/routing.md, "A
// farm's fair share"); it runs only with WARDEN_FAIR_SHARE_FARM=1, and
// reports, it asserts nothing. `warden serve --engine sim --dp 4
// --max-num-seqs 4 -- --max-model-len 16384 --sim-time-scale 10`
// (WARDEN_FARM_SEQS: another max_num_seqs), and
// WARDEN_FARM_SESSIONS (default 20) Claude-Code-like conversations, each
// with its own project prompt after a common one: a turn of 80 words, then
// a tool's pause of 0.3-2 s (3-20 simulated seconds); a quarter of them
// spawn 2-4 parallel subagents every third turn (each sharing its parent's
// system prompt, a 300-word task and two follow-ups; the parent waits for
// them); beside them one flooding tree, sixteen subagents sending
// 2,500-word prompts without pause. After 10 s, WARDEN_FARM_SECONDS
// (default 60) are measured. The warden's side comes from its environment:
// WARDEN_FAIR_SHARE=false (today's first come first served),
// WARDEN_SUBAGENTS=own|parent|near.
func TestFairShareFarm(t *testing.T) {
	if os.Getenv("WARDEN_FAIR_SHARE_FARM") == "" {
		t.Skip("a measurement: WARDEN_FAIR_SHARE_FARM=1 runs it")
	}
	sessions, seconds := envInt("WARDEN_FARM_SESSIONS", 20), envInt("WARDEN_FARM_SECONDS", 60)
	seqs := strconv.Itoa(envInt("WARDEN_FARM_SEQS", 4))
	dlog := cmp.Or(os.Getenv("WARDEN_FARM_LOG"), filepath.Join(t.TempDir(), "decisions.jsonl"))
	w := startServe(t, "--dp", "4", "--max-num-seqs", seqs, "--decision-log", dlog,
		"--", "--max-model-len", "16384", "--sim-time-scale", "10")
	url := w.url + "/v1/messages"
	f := &farm{from: time.Now().Add(10 * time.Second), ttft: map[string][]float64{}}
	ctx, cancel := context.WithDeadline(context.Background(), f.from.Add(time.Duration(seconds)*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() { f.session(ctx, url, i) })
	}
	for a := range 16 {
		wg.Go(func() { f.flood(ctx, url, a) })
	}
	time.Sleep(time.Until(f.from))
	before := w.status(t).Totals
	<-ctx.Done()
	after := w.status(t).Totals
	wg.Wait()
	f.report(t, before.PromptTokens, after.PromptTokens, after.CachedTokens-before.CachedTokens,
		after.CompletionTokens-before.CompletionTokens, conversationHits(t, dlog, f.from))
}

// conversationHits is the cached share of the prompt tokens of every tree
// but the flood's, from the decision log's lines that ended after from.
func conversationHits(t *testing.T, path string, from time.Time) float64 {
	time.Sleep(2 * time.Second) // the log's writer flushes on its own tick
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("decision log: %v", err)
		return 0
	}
	flood := decision.Session(floodSession)
	var prompt, cached uint64
	for line := range strings.Lines(string(b)) {
		var l decision.Line
		if json.Unmarshal([]byte(line), &l) != nil || l.Root == flood {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, l.Time); err != nil || at.Before(from) {
			continue
		}
		prompt, cached = prompt+l.Prompt, cached+l.Cached
	}
	if prompt == 0 {
		return 0
	}
	return float64(cached) / float64(prompt)
}

const floodSession = "f100d000-0000-4000-8000-000000000000"

// farm is what the farm's clients measured: each tree's times to first
// token (its root conversation's turns and its subagents'), the requests
// told to retry.
type farm struct {
	from time.Time // the measurement's start
	mu   sync.Mutex
	ttft map[string][]float64
	told int
}

func (f *farm) note(root string, sent time.Time, ttft float64, status int) {
	if sent.Before(f.from) || status == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if status != http.StatusOK {
		f.told++
		return
	}
	if ttft >= 0 {
		f.ttft[root] = append(f.ttft[root], ttft)
	}
}

// session is conversation i: turns with a tool's pause, and every third
// turn of a spawning one its subagents in parallel.
func (f *farm) session(ctx context.Context, url string, i int) {
	root := fmt.Sprintf("5e55105e-0000-4000-8000-%012d", i)
	c := newConversation(root, "", 1000+i)
	c.system = fairSystem + " " + c.words(1500) // the project's own prompt
	rng := rand.New(rand.NewPCG(uint64(i), 2))
	for turn := 0; ctx.Err() == nil; turn++ {
		if i%4 == 0 && turn%3 == 2 {
			f.subagents(ctx, url, root, c.system, i, turn, 2+i/4%3)
		}
		sent := time.Now()
		ttft, status, after := c.turn(ctx, url, 80, 256)
		f.note(root, sent, ttft, status)
		pause(ctx, max(after, time.Duration(300+rng.IntN(1700))*time.Millisecond))
	}
}

// subagents runs n subagents of root in parallel and waits for them.
func (f *farm) subagents(ctx context.Context, url, root, system string, i, turn, n int) {
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() {
			c := newConversation(root, fmt.Sprintf("a%08d%08d", turn, j), 5000+i*100+j)
			c.system = system + " You are a subagent. " + c.words(100)
			for k := range 3 {
				sent := time.Now()
				ttft, status, after := c.turn(ctx, url, map[bool]int{true: 300, false: 60}[k == 0], 256)
				f.note(root, sent, ttft, status)
				if ctx.Err() != nil {
					return
				}
				pause(ctx, max(after, 200*time.Millisecond))
			}
		})
	}
	wg.Wait()
}

// flood is the flooding tree's subagent a: 2,500-word prompts without pause.
func (f *farm) flood(ctx context.Context, url string, a int) {
	c := newConversation(floodSession, fmt.Sprintf("f%015d", a), 100+a)
	for ctx.Err() == nil {
		c.history = c.history[:0]
		sent := time.Now()
		ttft, status, after := c.turn(ctx, url, 2500, 512)
		f.note("flood", sent, ttft, status)
		pause(ctx, after)
	}
}

// report logs the trees' TTFT p95 (each tree's, then the worst and the
// median over the conversations' trees), Jain's fairness index over the
// conversations' trees' TTFT p95, the flood's, the hits, output and the
// requests told to retry.
func (f *farm) report(t *testing.T, prompt0, prompt1, cached, completion uint64, convHits float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p95s []float64
	turns := 0
	for root, v := range f.ttft {
		if root != "flood" {
			p95s = append(p95s, p95(v))
			turns += len(v)
		}
	}
	slices.Sort(p95s)
	sum, sq := 0.0, 0.0
	for _, x := range p95s {
		sum, sq = sum+x, sq+x*x
	}
	jain := 0.0
	if sq > 0 {
		jain = sum * sum / (float64(len(p95s)) * sq)
	}
	hits := 0.0
	if prompt1 > prompt0 {
		hits = float64(cached) / float64(prompt1-prompt0)
	}
	t.Logf("fair_share=%s subagents=%s: trees' TTFT p95 median %.3fs, worst %.3fs, Jain %.3f over %d trees (%d turns); "+
		"flood TTFT p95 %.3fs (%d requests); hits %.1f%% (the conversations' trees %.1f%%); output %d tokens; told to retry %d",
		os.Getenv("WARDEN_FAIR_SHARE"), os.Getenv("WARDEN_SUBAGENTS"), p95s[len(p95s)/2], p95s[len(p95s)-1], jain, len(p95s), turns,
		p95(f.ttft["flood"]), len(f.ttft["flood"]), 100*hits, 100*convHits, completion, f.told)
}

// envInt is the integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
