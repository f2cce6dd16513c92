package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/warden/sim/model"
)

// vLLM's own data parallelism (--data-parallel-size N): one HTTP server,
// N engines behind it, each with its own KV cache, prefix cache and
// scheduler. A request goes to the engine its X-data-parallel-rank header
// names where the endpoint reads it, else to the one vLLM's balancer picks.

// dpRankHeader is the header vLLM 0.32 reads the rank from
// (entrypoints/generate/base/serving.py, _get_data_parallel_rank); Go's
// header lookup is case-insensitive, as Starlette's.
const dpRankHeader = "X-Data-Parallel-Rank"

// requestedRank is the rank r's header asks for; ok is false without one.
// As _get_data_parallel_rank, a value int() cannot read is no rank at all
// (the request is balanced), not an error; Python's int() allows spaces
// around the digits and a sign.
func requestedRank(r *http.Request) (rank int, ok bool) {
	v := r.Header.Values(dpRankHeader)
	if len(v) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v[0]))
	return n, err == nil
}

// rankError is vLLM 0.32's refusal of a rank outside [0, N): raised as a
// VLLMValidationError in InputProcessor.process_inputs
// (v1/engine/input_processor.py), whatever the data-parallel size (1
// included: a plain server refuses rank 1 too). The engine client's
// generator is lazy, so the error comes when the answer is first read:
// a 400 BadRequestError for a whole answer (error_response.py maps
// VLLMValidationError to 400), and for a stream a 200 whose only event is
// the error.
func rankError(rank, n int) string {
	return fmt.Sprintf("data_parallel_rank %d is out of range [0, %d).", rank, n)
}

// dpLoad is one engine's load as the balancer sees it: vLLM's
// [waiting, running, kv_cache_usage].
type dpLoad struct {
	waiting, running float64
	kv               float64
}

// balancer is vLLM 0.32's DP load balancer for one API server: the
// engine client's DPLBAsyncMPClient.get_core_engine_for_request
// (v1/engine/core_client.py) over the counts the DP coordinator
// (v1/engine/coordinator.py) publishes, as engines report them
// (EngineCore._maybe_publish_request_counts, v1/engine/core.py).
type balancer struct {
	mu       sync.Mutex
	lb       []dpLoad // the client's lb_engines: the last published counts plus its own increments
	inflight []int    // engine_inflight: this client's unfinished requests per engine (exact)
	start    int      // eng_start_index: where the scan begins, rotated on every balanced pick

	// The coordinator's side: each engine's counts as it last reported
	// them (an engine reports when its waiting or running count changed),
	// whether any arrived since the last publication, and when that was.
	reported    []dpLoad
	changed     bool
	lastPublish time.Time

	// interval is the coordinator's stats_update_interval_ms (100 ms) and
	// idle its publication period when nothing changed (5 s), both in
	// wall time at the simulator's time scale.
	interval, idle time.Duration
}

func newBalancer(n int, timeScale float64) *balancer {
	scaled := func(d time.Duration) time.Duration {
		// A simulated interval in wall time, at least 1 ms: a faster
		// ticker costs CPU, and the in-flight floor keeps picks exact.
		return max(time.Duration(float64(d)/timeScale), time.Millisecond)
	}
	return &balancer{lb: make([]dpLoad, n), inflight: make([]int, n), reported: make([]dpLoad, n),
		interval: scaled(100 * time.Millisecond), idle: scaled(5 * time.Second)}
}

// report is engine i's step: it reports its counts (and KV usage) to the
// coordinator when its waiting or running count changed.
func (b *balancer) report(i int, s model.Snapshot) {
	w, r := float64(s.Waiting), float64(s.Running)
	b.mu.Lock()
	if p := b.reported[i]; p.waiting != w || p.running != r {
		b.reported[i] = dpLoad{waiting: w, running: r, kv: s.KVUsage}
		b.changed = true
	}
	b.mu.Unlock()
}

// publish is the coordinator's publication: every interval while engines
// report changes, every idle period otherwise. It replaces the client's
// counts, its own increments since the last one included.
func (b *balancer) publish(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.changed && now.Sub(b.lastPublish) < b.idle {
		return
	}
	copy(b.lb, b.reported)
	b.changed = false
	b.lastPublish = now
}

// run publishes until ctx ends.
func (b *balancer) run(ctx context.Context) {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			b.publish(now)
		}
	}
}

// pick is get_core_engine_for_request for a request without a rank (one
// API server: client_count 1, eng_start_index starting at 0). Each
// engine's score is the greater of this client's in-flight count and the
// published waiting + running, plus, when requests wait, 6 x waiting x
// (KV usage - 0.5) above half-full KV; the lowest wins, the first in the
// scan on a tie. The winner's waiting count rises by one until the next
// publication, and the scan start rotates by one on every pick (the tie
// rotation: at low load consecutive requests alternate engines).
func (b *balancer) pick() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.lb)
	best, minScore := 0, math.Inf(1)
	for k := range n {
		i := (b.start + k) % n
		c := b.lb[i]
		score := max(float64(b.inflight[i]), c.waiting+c.running)
		if c.waiting > 0 {
			score += c.waiting * 6 * max(0, c.kv-0.5)
		}
		if score < minScore {
			best, minScore = i, score
		}
	}
	b.lb[best].waiting++
	b.start = (b.start + 1) % n
	b.inflight[best]++
	return best
}

// pin counts a request sent to engine i by its header (vLLM counts it in
// engine_inflight as a balanced one).
func (b *balancer) pin(i int) {
	b.mu.Lock()
	b.inflight[i]++
	b.mu.Unlock()
}

// done is the end of a request on engine i, finished or aborted.
func (b *balancer) done(i int) {
	b.mu.Lock()
	b.inflight[i]--
	b.mu.Unlock()
}

// place chooses the engine of a generation request that passed its
// checks: the rank r's header names when honour (the endpoint reads it),
// else the balancer's (or the only engine). A rank out of range is
// answered as vLLM answers it, by refuse(msg); place then returns false.
func (s *server) place(r *http.Request, p *genPlan, honour bool, refuse func(msg string)) bool {
	p.rank = 0
	if rank, ok := requestedRank(r); honour && ok {
		if rank < 0 || rank >= len(s.engs) {
			refuse(rankError(rank, len(s.engs)))
			return false
		}
		p.rank = rank
		if s.bal != nil {
			s.bal.pin(rank)
		}
	} else if s.bal != nil {
		p.rank = s.bal.pick()
	}
	p.placed = true
	return true
}

// pythonJSONError is vLLM's create_streaming_error_response: the error
// object as Python's json.dumps writes it (", " and ": " separators).
func pythonJSONError(code int, msg string) string {
	q, _ := json.Marshal(msg)
	return fmt.Sprintf(`{"error": {"message": %s, "type": %q, "param": null, "code": %d}}`, q, errorType(code), code)
}

// refuseOpenAI answers a refused rank on chat completions and completions:
// 400 for a whole answer; a stream is a 200 with the error event and
// [DONE] (chat_completion_stream_generator's except clause).
func refuseOpenAI(w http.ResponseWriter, stream bool) func(string) {
	return func(msg string) {
		if !stream {
			openAIError(w, http.StatusBadRequest, msg)
			return
		}
		sse := newSSE(w)
		_ = sse.event("", pythonJSONError(http.StatusBadRequest, msg))
		_ = sse.event("", "[DONE]")
	}
}

// refuseMessages answers a refused rank on Messages: a whole answer is
// vLLM's 400 (translate_error_response); a stream is a 200 with one
// `error` event of type internal_error, as message_stream_converter
// answers the chat stream's error chunk. vLLM's message there is pydantic's
// complaint about that chunk; the simulator gives the rank error instead.
func refuseMessages(w http.ResponseWriter, stream bool) func(string) {
	return func(msg string) {
		if !stream {
			anthropicError(w, http.StatusBadRequest, msg)
			return
		}
		sse := newSSE(w)
		_ = sse.event("error", map[string]any{"type": "error", "error": map[string]any{"type": "internal_error", "message": msg}})
	}
}
