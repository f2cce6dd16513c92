// Package schema is the warden's status as JSON at GET /warden/status
// (Path): the Status snapshot and its parts, what is computed from them
// alone (totals, overcommit), and Fetch, which reads it from a running
// warden, with the URL rules of `warden status`. No rendering: the tools
// that read a warden's status (bench, run, sweep) import it without the
// page (router/panel renders it: HTML, the terminal table, the exit
// summary, the collector).
package schema

import "time"

// Status is the snapshot served as JSON at GET /warden/status. It is the one
// contract between the router core (which fills it), the HTML page, the
// `warden status` terminal table, the exit summary, the Prometheus collector
// and `warden bench` (which reads the engines' counters through it).
//
// Counters named "since start" run from Since (warden start); engine counters
// are deltas of the engines' own Prometheus counters since Since, with engine
// restarts (counter resets) handled.
type Status struct {
	Since         time.Time `json:"since"`
	Now           time.Time `json:"now"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Model         string    `json:"model"`  // the one served model name
	Policy        string    `json:"policy"` // off | hash | sticky | ...
	// EngineTimeScale is the engines' simulated seconds per wall second (a
	// simulator's --sim-time-scale; 1 for real engines): a client that
	// times the answers (warden bench) reads them on this clock.
	EngineTimeScale float64   `json:"engine_time_scale"`
	Affinity        bool      `json:"affinity"`        // false when policy is "off"
	SpillThreshold  int       `json:"spill_threshold"` // in-flight requests above which a sticky turn spills
	SpillAuto       bool      `json:"spill_threshold_auto"`
	StickyShare     float64   `json:"sticky_share"` // turns served on their session's home / turns of known sessions (0..1)
	InFlight        int       `json:"in_flight"`
	Sessions        int       `json:"sessions"`      // remembered: sessions in the table (not expired); "sessions" unqualified is ActiveSessionCount
	SessionsSeen    uint64    `json:"sessions_seen"` // distinct sessions since start
	Replicas        []Replica `json:"replicas"`
	Totals          Totals    `json:"totals"`
	// MissTokens are the prompt tokens of finished turns that missed the
	// prefix cache on any replica, by reason (Replica.MissTokens summed).
	MissTokens map[string]uint64 `json:"miss_tokens,omitempty"`
	Series     []Point           `json:"series,omitempty"` // token rates, oldest first, last hour at most
	Warnings   []string          `json:"warnings,omitempty"`

	// ActiveContextTokens sums, over the active sessions whose context is
	// known, each session's latest context length in tokens (prompt +
	// completion of its last finished turn, as the usage report said).
	// ActiveContextSessions counts those sessions; mean context =
	// ActiveContextTokens / ActiveContextSessions. Both 0 when unknown.
	ActiveContextTokens   uint64 `json:"active_context_tokens"`
	ActiveContextSessions int    `json:"active_context_sessions"`
	// ConcurrentSessions counts the sessions that had a turn recently (the
	// core chooses the window, e.g. 5 minutes), as opposed to Sessions,
	// which keeps idle ones until their TTL. Overcommit uses it when > 0,
	// else Sessions; ActiveContext* should then cover the same sessions.
	ConcurrentSessions int `json:"concurrent_sessions,omitempty"`
	// ActiveWindowSeconds is the core's window: a session with a request
	// within it is active (twice the 90th percentile of the gaps seen
	// between a session's requests, at least 30 s).
	ActiveWindowSeconds float64 `json:"active_window_seconds,omitempty"`
	// SubagentSessions counts the active conversations that are subagents'
	// (Claude Code's x-claude-code-agent-id, a Codex child thread, an
	// opencode child session), included in ConcurrentSessions;
	// SubagentsSeen the distinct ones since start.
	SubagentSessions int    `json:"subagent_sessions,omitempty"`
	SubagentsSeen    uint64 `json:"subagents_seen,omitempty"`
	// PeakOvercommit is the worst moment of the run at which active sessions
	// x mean context exceeded the total KV capacity; nil if that never
	// happened. The core keeps it with panel.UpdatePeak on every snapshot.
	PeakOvercommit *OvercommitPeak `json:"peak_overcommit,omitempty"`

	// MaxModelLen is the smallest context of the replicas that are up
	// (SmallestContext): what a client can count on wherever it lands.
	MaxModelLen int `json:"max_model_len,omitempty"`

	// Engines says how `warden serve` started its engines; nil for `warden
	// route`, which starts none (warden run then probes the engines).
	Engines *EngineSetup `json:"engines,omitempty"`
}

// EngineSetup is what the warden passed its engines that a client cares
// about: whether requests with tools are accepted.
type EngineSetup struct {
	// AutoToolChoice: the engines run with --enable-auto-tool-choice and
	// ToolCallParser (the warden's choice, or the user's after --), so the
	// tool_choice "auto" every coding agent sends is accepted.
	AutoToolChoice  bool   `json:"auto_tool_choice"`
	ToolCallParser  string `json:"tool_call_parser,omitempty"`
	ReasoningParser string `json:"reasoning_parser,omitempty"`
	// Tools says how that was decided (or why tool calls are off); ToolsFix,
	// when they are off, how to turn them on.
	Tools    string `json:"tools,omitempty"`
	ToolsFix string `json:"tools_fix,omitempty"`
	// OffloadHint, when the engines run without a host KV tier that they
	// could have, is what the overcommit warning adds as a remedy.
	OffloadHint string `json:"offload_hint,omitempty"`
	// Simulator, when the engines are the built-in simulator, is what a
	// user meeting it must know, in lines (sim.FirstContact): its answers
	// are filler text, how long they run, how fast its time runs.
	Simulator []string `json:"simulator,omitempty"`
}

// ActiveSessionCount is what "sessions" means wherever the panel, the
// status table and the page show the word unqualified: the conversations
// with a turn within the active window (ConcurrentSessions), which is the
// sum of the replicas' ActiveSessions. Sessions (remembered: still in the
// session table, their replica kept for a returning turn) and SessionsSeen
// (distinct since start) are always shown with their qualifier. Without a
// window (ActiveWindowSeconds 0) it is Sessions.
func (s Status) ActiveSessionCount() int {
	if s.ActiveWindowSeconds > 0 {
		return s.ConcurrentSessions
	}
	return s.Sessions
}

// OvercommitPeak records a moment at which the active conversations needed
// more KV cache than all replicas together have (see Overcommit).
type OvercommitPeak struct {
	At       time.Time `json:"at"`
	Sessions int       `json:"sessions"` // active sessions then
	// WindowSeconds is what made a session active then: a turn within
	// this many seconds (Status.ActiveWindowSeconds); 0 when Sessions
	// counts the remembered sessions (no window).
	WindowSeconds     float64 `json:"window_seconds,omitempty"`
	MeanContextTokens int     `json:"mean_context_tokens"` // their mean context then
	CapacityTokens    int     `json:"capacity_tokens"`     // total KV capacity then
	Hint              string  `json:"hint,omitempty"`      // a further remedy (EngineSetup.OffloadHint)
}

// Replica is one row of the panel.
type Replica struct {
	Rank int      `json:"rank"`
	GPUs []string `json:"gpus,omitempty"` // GPU indices or UUIDs of this rank's group; empty for sim/route
	URL  string   `json:"url"`            // engine base URL, e.g. http://127.0.0.1:8101
	// DPRank is the engine of a vLLM data-parallel server at URL that the
	// replica is pinned to (X-data-parallel-rank); nil when the replica is
	// the whole server.
	DPRank     *int   `json:"dp_rank,omitempty"`
	Port       int    `json:"port"`
	Up         bool   `json:"up"` // routable now
	State      string `json:"state"`
	Restarts   int    `json:"restarts"`
	MaxNumSeqs int    `json:"max_num_seqs"`
	// LastCrash is how the engine last went down and where its restarts
	// stand (`warden serve`: the launcher's record); nil when it never
	// went down.
	LastCrash *Crash `json:"last_crash,omitempty"`
	// MaxModelLen is the context the engine serves at (its /v1/models
	// max_model_len); 0 until known.
	MaxModelLen int `json:"max_model_len,omitempty"`

	// Ours, exact.
	InFlight       int    `json:"in_flight"`
	Requests       uint64 `json:"requests"` // proxied requests that reached this replica since start
	New            uint64 `json:"new"`      // first turns of sessions placed here
	Sticky         uint64 `json:"sticky"`   // turns that stayed on their session's home (this replica)
	SpilledIn      uint64 `json:"spilled_in"`
	Pinned         uint64 `json:"pinned"` // turns the client pinned here (X-Warden-Replica)
	Failover       uint64 `json:"failover"`
	Balanced       uint64 `json:"balanced"` // turns placed by a non-affinity policy (off, hash)
	Errors         uint64 `json:"errors"`   // 5xx / transport errors from this replica
	ActiveSessions int    `json:"active_sessions"`
	// ActiveSubagents counts the subagent conversations among ActiveSessions.
	ActiveSubagents int `json:"active_subagents,omitempty"`

	// From finished requests' usage reports (never estimated).
	PromptTokens     uint64 `json:"prompt_tokens"`
	CachedTokens     uint64 `json:"cached_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`

	// Scraped from the engine's /metrics (gauges: latest value).
	Running          float64 `json:"running"`
	Waiting          float64 `json:"waiting"`
	KVUsed           float64 `json:"kv_used"`            // 0..1
	KVCapacityTokens int     `json:"kv_capacity_tokens"` // num_gpu_blocks x block_size; 0 if unknown
	// Engine counters as deltas since warden start (tokens).
	PrefixQueries   float64   `json:"prefix_queries"`
	PrefixHits      float64   `json:"prefix_hits"`
	HitRate         float64   `json:"hit_rate"` // PrefixHits / PrefixQueries, 0 if no queries
	EnginePrompt    float64   `json:"engine_prompt_tokens"`
	EngineGenerated float64   `json:"engine_generation_tokens"`
	Preemptions     float64   `json:"preemptions"`
	ScrapedAt       time.Time `json:"scraped_at"`
	ScrapeError     string    `json:"scrape_error,omitempty"`

	// The engine's truth (router/ledger) from its KV-cache events:
	// KVEvents is "live" (placement reads it), "joining" (subscribed, not
	// caught up yet), "silent" (no event came although the engine served
	// turns: the estimate decides) or "" (no events configured).
	// LedgerBlocks and LedgerConversations are what the ledger holds of it.
	KVEvents            string `json:"kv_events,omitempty"`
	LedgerBlocks        int    `json:"ledger_blocks,omitempty"`
	LedgerConversations int    `json:"ledger_conversations,omitempty"`
	// MissTokens are the prompt tokens of its finished turns that missed
	// the prefix cache, by reason (router/ledger's Miss*: new, evicted,
	// moved, restarted, prefix_changed, unknown).
	MissTokens map[string]uint64 `json:"miss_tokens,omitempty"`

	// The host-RAM KV tier (vLLM's KV offloading), from the engine's
	// metrics; all zero when it has none. OffloadBytes is the configured
	// size (vllm:cache_config_info's kv_offloading_size: vLLM exports no
	// gauge of the tier's fill), 0 when unknown (LMCache). The counters
	// are deltas since warden start: OffloadQueries the prompt tokens that
	// missed the GPU prefix cache and were looked up in the tier, and
	// OffloadHits those found there and loaded back
	// (vllm:external_prefix_cache_queries / _hits); the bytes loaded from
	// and stored to it (vllm:kv_offload_load_bytes / _store_bytes). The
	// usage reports' cached tokens include the tier's hits; PrefixHits does
	// not.
	OffloadBackend     string  `json:"offload_backend,omitempty"` // "native", "lmcache"; "" none
	OffloadBytes       uint64  `json:"offload_bytes,omitempty"`
	OffloadQueries     float64 `json:"offload_queries,omitempty"`
	OffloadHits        float64 `json:"offload_hits,omitempty"`
	OffloadHitRate     float64 `json:"offload_hit_rate,omitempty"` // OffloadHits / OffloadQueries
	OffloadLoadedBytes float64 `json:"offload_loaded_bytes,omitempty"`
	OffloadStoredBytes float64 `json:"offload_stored_bytes,omitempty"`
	// OffloadFilled estimates how full the tier is (0..1; -1 not known):
	// bytes the engine stored since it started over the tier's size. vLLM
	// reports neither occupancy nor evictions; it evicts only for room, so
	// this is exact until the tier is full (engine.Stats.OffloadFilled).
	OffloadFilled float64 `json:"offload_filled,omitempty"`
}

// HasOffload reports whether the replica's engine has a host KV tier.
func (r Replica) HasOffload() bool { return r.OffloadBackend != "" || r.OffloadBytes > 0 }

// HasOffload reports whether any replica has a host KV tier: the table,
// the page and the summary show its columns only then.
func (s Status) HasOffload() bool {
	for _, r := range s.Replicas {
		if r.HasOffload() {
			return true
		}
	}
	return false
}

// Crash is a replica's engine going down as its launcher saw it
// (launch.Crash): a crash, or a restart that failed.
type Crash struct {
	At    time.Time `json:"at"`
	Cause string    `json:"cause"`         // "exited with status 1: <vLLM's cause line>"
	Fix   string    `json:"fix,omitempty"` // what to do, for a known cause
	// Failures in a row, this one included: crashes within a minute of
	// becoming healthy and failed restarts. CrashLoop: enough of them that
	// the warden logged the cause and fix once and calls it a crash loop.
	Failures  int  `json:"failures"`
	CrashLoop bool `json:"crash_loop"`
	// RestartsTried counts the restarts begun since the warden started,
	// failed ones included (Replica.Restarts counts those that came up).
	RestartsTried int `json:"restarts_tried"`
	// RetrySeconds is the wait after At before the next restart: it
	// doubles per failure in a row, up to a cap.
	RetrySeconds float64 `json:"retry_seconds"`
}

// Totals sums the replica rows.
type Totals struct {
	Requests         uint64  `json:"requests"`
	Sticky           uint64  `json:"sticky"`
	SpilledIn        uint64  `json:"spilled"`
	Pinned           uint64  `json:"pinned"`
	PromptTokens     uint64  `json:"prompt_tokens"`
	CachedTokens     uint64  `json:"cached_tokens"`
	CompletionTokens uint64  `json:"completion_tokens"`
	CachedShare      float64 `json:"cached_share"` // CachedTokens / PromptTokens (usage reports)
	PrefixQueries    float64 `json:"prefix_queries"`
	PrefixHits       float64 `json:"prefix_hits"`
	HitRate          float64 `json:"hit_rate"` // engine counters
	KVCapacityTokens int     `json:"kv_capacity_tokens"`
	// The host KV tiers summed (see Replica).
	OffloadBytes   uint64  `json:"offload_bytes,omitempty"`
	OffloadQueries float64 `json:"offload_queries,omitempty"`
	OffloadHits    float64 `json:"offload_hits,omitempty"`
	OffloadHitRate float64 `json:"offload_hit_rate,omitempty"`
}

// TotalsOf sums the replicas' rows and derives the shares (zero without
// data).
func TotalsOf(rows []Replica) Totals {
	var t Totals
	for _, r := range rows {
		t.Requests += r.Requests
		t.Sticky += r.Sticky
		t.SpilledIn += r.SpilledIn
		t.Pinned += r.Pinned
		t.PromptTokens += r.PromptTokens
		t.CachedTokens += r.CachedTokens
		t.CompletionTokens += r.CompletionTokens
		t.PrefixQueries += r.PrefixQueries
		t.PrefixHits += r.PrefixHits
		t.KVCapacityTokens += r.KVCapacityTokens
		t.OffloadBytes += r.OffloadBytes
		t.OffloadQueries += r.OffloadQueries
		t.OffloadHits += r.OffloadHits
	}
	if t.PromptTokens > 0 {
		t.CachedShare = float64(t.CachedTokens) / float64(t.PromptTokens)
	}
	if t.PrefixQueries > 0 {
		t.HitRate = t.PrefixHits / t.PrefixQueries
	}
	if t.OffloadQueries > 0 {
		t.OffloadHitRate = t.OffloadHits / t.OffloadQueries
	}
	return t
}

// Point is one bucket of the token time series: the token counts of the
// requests that finished in the bucket [T, T+Seconds); the page divides them
// by Seconds to draw per-second rates averaged over the bucket.
type Point struct {
	T                time.Time `json:"t"`
	Seconds          float64   `json:"seconds"` // bucket width
	CachedTokens     uint64    `json:"cached_tokens"`
	ComputedTokens   uint64    `json:"computed_tokens"` // prompt tokens not reported cached
	CompletionTokens uint64    `json:"completion_tokens"`
}

// SmallestContext is the smallest known max_model_len of the replicas that
// are up (of all, when none is up); 0 when none is known.
func SmallestContext(reps []Replica) int {
	n := 0
	for _, up := range []bool{true, false} {
		for _, r := range reps {
			if (r.Up || !up) && r.MaxModelLen > 0 && (n == 0 || r.MaxModelLen < n) {
				n = r.MaxModelLen
			}
		}
		if n > 0 {
			return n
		}
	}
	return 0
}
