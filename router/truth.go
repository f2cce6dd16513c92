package router

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/kvevents"
	"github.com/lmwarden/warden/router/ledger"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/schema"
	"github.com/lmwarden/warden/router/tap"
)

// The engines' truth (docs/kv-events.md): each replica whose engine
// publishes vLLM's KV-cache events has a subscriber (a feed) that applies
// them to the replica's part of the ledger, off the request path; placement
// reads every live part (residency), each request tells its engine its
// conversation's label and, where the ledger cannot place the
// conversation's chain, asks for a full report (Hints); a finished turn's
// uncached tokens are labelled with why (accountMiss).

// KVEvents is where a replica's engine publishes its KV-cache events
// (vLLM's --kv-events-config); the zero value: it publishes none.
type KVEvents struct {
	// Endpoint is the engine's PUB socket: tcp://host:port or
	// ipc:///path, which the engine binds and the warden connects to.
	Endpoint string
	// Bind: the engine was given a plain tcp://host:port and connects
	// out; the warden binds Endpoint (on loopback: serve --vllm-dp).
	Bind bool
	// Replay is the engine's replay socket ("" = none: a gap cannot heal
	// and a late start cannot catch up).
	Replay string
}

// On reports whether the engine publishes events.
func (k KVEvents) On() bool { return k.Endpoint != "" }

// check refuses endpoints the subscriber cannot use, naming the replica
// spec they came from.
func (k KVEvents) check(spec string) error {
	for _, ep := range []string{k.Endpoint, k.Replay} {
		if ep != "" && !strings.HasPrefix(ep, "tcp://") && !strings.HasPrefix(ep, "ipc://") {
			return fmt.Errorf("replica %q: KV events endpoint %q: want tcp://HOST:PORT or ipc:///PATH", spec, ep)
		}
	}
	if k.Replay != "" && k.Endpoint == "" {
		return fmt.Errorf("replica %q: kv_replay without kv (the engine's events endpoint)", spec)
	}
	return nil
}

// ForRank is where engine rank of a vLLM data-parallel server publishes:
// vLLM offsets a tcp port by the rank.
func (k KVEvents) ForRank(rank int) KVEvents {
	if rank == 0 {
		return k
	}
	if ep, err := kvevents.RankEndpoint(k.Endpoint, rank); err == nil {
		k.Endpoint = ep
	}
	if ep, err := kvevents.RankEndpoint(k.Replay, rank); err == nil {
		k.Replay = ep
	}
	return k
}

// Template fills a --kv-events template for a replica at host: {host} is
// the replica URL's host name.
func (k KVEvents) Template(host string) KVEvents {
	k.Endpoint = strings.ReplaceAll(k.Endpoint, "{host}", host)
	k.Replay = strings.ReplaceAll(k.Replay, "{host}", host)
	return k
}

// eventsNeverCame is how many turns with a whole block of prompt a replica
// serves with no event before its events are taken to be off (an engine
// older than vLLM 0.32, or started without --kv-events-config).
const eventsNeverCame = 3

// kvState is a replica's ledger and its feed's state.
type kvState struct {
	ledger    *ledger.Engine
	cfg       KVEvents
	turns     atomic.Int32 // turns finished before the first event
	silent    atomic.Bool  // events never came: the estimate decides (said once)
	confirmed atomic.Bool  // a store that names a conversation came: no more checks
	started   atomic.Bool

	missMu sync.Mutex
	miss   map[string]uint64 // uncached prompt tokens by reason
}

// truthNote is what placement read of the engines' truth for one request,
// carried to its end on the Placement (Note).
type truthNote struct {
	label  string
	full   bool
	live   bool
	before ledger.Residency
	shared int
}

// feeds are the running subscribers, one per replica with events.
type feeds struct {
	mu  sync.Mutex
	run map[*Replica]context.CancelFunc
}

// CatchUpLimit bounds how long a starting core waits for its feeds to
// replay the engines' history before it says it is ready without them
// (Ready; what was not recovered is logged).
const CatchUpLimit = 30 * time.Second

// catchUp is the feeds' first catch-up: since when Run has run them (unix
// nanoseconds; 0: not yet), and whether it is over (it is never waited
// for again: a replica added later does not take readiness away).
type catchUp struct {
	since atomic.Int64
	done  atomic.Bool
}

// CaughtUp reports whether the feeds' first catch-up is over (caughtUp).
func (c *Core) CaughtUp() bool { return c.caughtUp() }

// caughtUp reports whether every replica in rotation whose engine
// publishes KV events has had its feed catch up (the engine's replay
// applied), so that placement knows what the engines hold before the
// core claims readiness: a restarted picker or router finds every
// conversation's home as the others know it. After CatchUpLimit it gives
// up waiting and logs, per replica behind, what placement lacks there.
func (c *Core) caughtUp() bool {
	if c.catchUp.done.Load() {
		return true
	}
	var behind []*Replica
	for _, r := range c.Replicas() {
		if r.kv.cfg.On() && r.Healthy() && !r.kv.started.Load() {
			behind = append(behind, r)
		}
	}
	since := c.catchUp.since.Load()
	switch {
	case len(behind) == 0:
	case since == 0 || c.clock().Sub(time.Unix(0, since)) < CatchUpLimit:
		return false
	default:
		for _, r := range behind {
			r.log.Warn("KV events: the engine's history was not replayed in time; ready without it: conversations "+
				"placed here before this start are found only as their next turns' full reports arrive",
				"endpoint", r.kv.cfg.Endpoint, "replay", r.kv.cfg.Replay, "waited", CatchUpLimit)
		}
	}
	if c.catchUp.done.CompareAndSwap(false, true) && since != 0 {
		c.log.Info("KV events: caught up", "took", c.clock().Sub(time.Unix(0, since)).Round(time.Millisecond),
			"behind", len(behind))
	}
	return true
}

// syncFeeds starts a feed for each replica with events that has none and
// stops those of replicas removed. Run calls it every scrape interval.
func (c *Core) syncFeeds(ctx context.Context) {
	reps := c.Replicas()
	c.catchUp.since.CompareAndSwap(0, c.clock().UnixNano())
	c.feeds.mu.Lock()
	defer c.feeds.mu.Unlock()
	if c.feeds.run == nil {
		c.feeds.run = map[*Replica]context.CancelFunc{}
	}
	current := map[*Replica]bool{}
	for _, r := range reps {
		current[r] = true
		if !r.kv.cfg.On() || c.feeds.run[r] != nil {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		c.feeds.run[r] = cancel
		go c.feed(fctx, r)
	}
	for r, cancel := range c.feeds.run {
		if !current[r] {
			cancel()
			delete(c.feeds.run, r)
		}
	}
}

// feed subscribes to r's engine until ctx ends, resubscribing after an
// error (a bind refused, a bad endpoint) with the reason logged once.
func (c *Core) feed(ctx context.Context, r *Replica) {
	k := r.kv.cfg
	r.log.Info("KV events: subscribing", "endpoint", k.Endpoint, "replay", k.Replay, "bind", k.Bind)
	said := ""
	for ctx.Err() == nil {
		err := kvevents.Subscribe(ctx, kvevents.SubscriberConfig{Endpoint: k.Endpoint, Bind: k.Bind, Replay: k.Replay,
			Logger: r.log}, func(u kvevents.Update) { c.apply(r, u) })
		if ctx.Err() != nil {
			return
		}
		if err != nil && err.Error() != said {
			said = err.Error()
			r.log.Error("KV events: cannot subscribe; placement uses the estimate for this replica until it can",
				"endpoint", k.Endpoint, "error", err)
		}
		r.kv.ledger.SetLive(false)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// apply is one update of r's feed, on the feed's goroutine.
func (c *Core) apply(r *Replica, u kvevents.Update) {
	l := r.kv.ledger
	switch {
	case u.Batch != nil:
		for i := range u.Batch.Events {
			ev := &u.Batch.Events[i]
			switch ev.Kind {
			case kvevents.KindStored:
				l.Store(ev.SessionID, ev.Hashes, ev.Parent, ev.HasParent, ev.Medium, ev.BlockSize)
			case kvevents.KindRemoved:
				l.Remove(ev.Hashes, ev.Medium)
			case kvevents.KindCleared:
				l.Clear()
				r.log.Info("KV events: the engine cleared its prefix cache")
			}
		}
		l.Batch()
		c.truthMetrics.batches.WithLabelValues(strconv.Itoa(r.rank)).Inc()
	case u.Gap != nil:
		l.Reset(true, true)
		c.truthMetrics.gaps.WithLabelValues(strconv.Itoa(r.rank)).Inc()
		r.log.Warn("KV events: batches lost that the engine's replay no longer holds; this replica's ledger starts "+
			"afresh, and each conversation's next turn here asks the engine for a full report",
			"from", u.Gap.From, "to", u.Gap.To)
	case u.Restarted:
		l.Reset(false, true)
		r.log.Info("KV events: the engine's event sequence started again (a new engine process): its ledger starts afresh")
	case u.CaughtUp:
		l.SetLive(true)
		if r.kv.started.CompareAndSwap(false, true) {
			st := l.Stats()
			if r.kv.cfg.Replay == "" {
				r.log.Warn("KV events: live without a replay endpoint: what the engine held before this start is " +
					"unknown here until its conversations' next turns report it in full (kv_replay=, --kv-events-replay)")
			}
			r.log.Info("KV events: live", "batches_replayed", st.Batches, "conversations", st.Sessions)
		}
	}
}

// truthLive reports whether r's part of the ledger can be trusted:
// events configured, the feed caught up, and a store that names a
// conversation seen (an engine whose events never come, or come without
// labels, is not read as holding nothing).
func (r *Replica) truthLive() bool {
	k := &r.kv
	if !k.cfg.On() || k.silent.Load() || !k.ledger.Live() {
		return false
	}
	if !k.confirmed.Load() {
		if _, labelled := k.ledger.Stores(); labelled == 0 {
			return false
		}
		k.confirmed.Store(true)
	}
	return true
}

// residency is the engines' truth about label's conversation, one entry
// per replica whose ledger is live; nil when none is.
func (c *Core) residency(label string) []place.Resident {
	if label == "" {
		return nil
	}
	var out []place.Resident
	for _, r := range c.Replicas() {
		if !r.truthLive() {
			continue
		}
		if res := r.kv.ledger.Resident(label); res.Known {
			out = append(out, place.Resident{Rank: r.rank, Tokens: res.Tokens, Shared: r.kv.ledger.Shared(), Key: r.Key()})
		}
	}
	return out
}

// noteTruth records on a placement with a replica what the truth said
// there, for its hints and its miss accounting.
func (c *Core) noteTruth(pl *Placement, label string) {
	r := pl.Replica
	n := &truthNote{label: label, live: r.truthLive()}
	if n.live {
		n.before = r.kv.ledger.Resident(label)
		n.full = r.kv.ledger.NeedsReport(label)
		n.shared = r.kv.ledger.Shared()
	}
	pl.Note = n
}

// ForEngine is what a placed request carries to its engine for the
// ledger: the body to send and the X-Session-ID value (SessionIDHeader;
// "" none). The conversation's label replaces a body's own top-level
// session_id (vLLM labels its events with that one first), and where the
// ledger cannot place the conversation's chain on that engine the body
// asks for a full report of the reused prefix (vllm_xargs
// kv_cache_report_mode "full"). Only the completion APIs' (kind) JSON
// bodies are edited, in a copy: body stays as it was for a retry
// elsewhere. sessionField: the body has a top-level session_id
// (Request.Fields.SessionID, read before any edit).
func (c *Core) ForEngine(pl *Placement, kind tap.Kind, sessionField bool, body []byte) ([]byte, string) {
	n, _ := pl.Note.(*truthNote)
	if n == nil || n.label == "" || kind == tap.None {
		return body, ""
	}
	out := body // sjson.SetBytes writes a new slice
	if sessionField {
		if b, err := sjson.SetBytes(out, "session_id", n.label); err == nil {
			out = b
		}
	}
	if n.full {
		if b, err := sjson.SetBytes(out, "vllm_xargs.kv_cache_report_mode", "full"); err == nil {
			out = b
		}
	}
	return out, n.label
}

// SessionIDHeader carries the conversation's label to vLLM, which copies
// it into the KV-cache events the request causes (a request body's own
// session_id field wins there: the data planes replace it).
const SessionIDHeader = "X-Session-ID"

// missed is what accountMiss found for one turn.
type missed struct {
	predicted int
	source    string // "ledger" or "estimate"
	reason    string // the avoidable part's reason, else "new" when anything missed, else ""
}

// checkEventsCame takes a replica's events to be off, once, when it served
// eventsNeverCame turns of a whole block or more of prompt while its
// engine reported no store that names a conversation: none at all (vLLM
// started without --kv-events-config, or the endpoint is not the engine's)
// or none labelled (vLLM older than 0.32 publishes no session_id). Once a
// labelled store came it checks no more.
func (r *Replica) checkEventsCame(u tap.Usage) {
	k := &r.kv
	if !k.cfg.On() || k.silent.Load() || k.confirmed.Load() || u.Prompt < 2*uint64(k.ledger.BlockSize()) {
		return
	}
	stored, labelled := k.ledger.Stores()
	if labelled > 0 {
		k.confirmed.Store(true)
		return
	}
	if k.turns.Add(1) < eventsNeverCame || !k.silent.CompareAndSwap(false, true) {
		return
	}
	if stored == 0 {
		r.log.Warn("KV events: none arrived although the engine served turns (started without --kv-events-config, "+
			"or the endpoint is not the engine's): placement uses the estimate for this replica", "endpoint", k.cfg.Endpoint)
	} else {
		r.log.Warn("KV events: the engine's events name no conversation (vLLM older than 0.32 publishes no session_id): "+
			"placement uses the estimate for this replica", "endpoint", k.cfg.Endpoint, "stores", stored)
	}
}

// accountMiss labels the turn's uncached prompt tokens by cause
// (ledger.Classify), counts them, and says what placement predicted.
func (c *Core) accountMiss(pl *Placement, u tap.Usage) missed {
	r := pl.Replica
	n, _ := pl.Note.(*truthNote)
	if n == nil {
		n = &truthNote{}
	}
	if n.label != "" { // only turns that told the engine their conversation can show it publishes none
		r.checkEventsCame(u)
	}
	bs := ledger.DefaultBlockSize
	t := ledger.Turn{Prompt: int(u.Prompt), Cached: int(u.Cached), PrevContext: pl.PrevContext,
		First: pl.PrevTurns == 0 && !pl.Known && !pl.Adopted, Moved: pl.PrefixOn >= 0 && pl.PrefixOn != r.rank,
		EstimateResident: pl.PrefixOn == r.rank, Before: n.before}
	m := missed{source: "estimate"}
	if n.live {
		bs = r.kv.ledger.BlockSize()
		t.After = r.kv.ledger.Resident(n.label)
		m.source = "ledger"
		if pl.Adopted && t.PrevContext == 0 {
			t.PrevContext = n.before.Chain
		}
	}
	t.BlockSize = bs
	limit := max(int(u.Prompt)-1, 0) / bs * bs // vLLM always computes a prompt's last token
	switch {
	case n.live && n.before.Chain > 0:
		m.predicted = n.before.Tokens
	case n.live:
		m.predicted = n.shared
	case pl.PrefixOn == r.rank:
		m.predicted = pl.PrevContext / bs * bs
	}
	m.predicted = min(m.predicted, limit)
	parts := ledger.Classify(t)
	rank := strconv.Itoa(r.rank)
	for _, p := range parts {
		c.truthMetrics.miss.WithLabelValues(rank, p.Reason).Add(float64(p.Tokens))
		r.missTokens(p.Reason, p.Tokens)
		m.reason = p.Reason // the last part is the avoidable one when there is one
	}
	return m
}

// truthMetrics are the ledger's series.
type truthMetrics struct {
	miss    *prometheus.CounterVec
	batches *prometheus.CounterVec
	gaps    *prometheus.CounterVec
}

func newTruthMetrics(reg prometheus.Registerer) (*truthMetrics, error) {
	m := &truthMetrics{
		miss: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_prefix_miss_tokens_total",
			Help: "Prompt tokens of finished turns not found in the prefix cache, by replica and why: new (no engine had seen them: a new conversation, a turn's new input), evicted (on the replica that served it), moved (served away from its prefix), restarted (the engine restarted or cleared its cache), prefix_changed (the client changed its own prefix), unknown.",
		}, []string{"replica", "reason"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_kv_event_batches_total",
			Help: "KV-cache event batches applied to the ledger, by replica.",
		}, []string{"replica"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_kv_event_gaps_total",
			Help: "Gaps in a replica's KV-cache events that its replay could not heal (its ledger started afresh).",
		}, []string{"replica"}),
	}
	for _, col := range []prometheus.Collector{m.miss, m.batches, m.gaps} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// missTokens adds tokens to the replica's count of misses for reason.
func (r *Replica) missTokens(reason string, tokens int) {
	r.kv.missMu.Lock()
	if r.kv.miss == nil {
		r.kv.miss = map[string]uint64{}
	}
	r.kv.miss[reason] += uint64(tokens)
	r.kv.missMu.Unlock()
}

// MissTokens is the replica's uncached prompt tokens so far by reason.
func (r *Replica) MissTokens() map[string]uint64 {
	r.kv.missMu.Lock()
	defer r.kv.missMu.Unlock()
	out := make(map[string]uint64, len(r.kv.miss))
	for k, v := range r.kv.miss {
		out[k] = v
	}
	return out
}

// truthStatus fills the status row's ledger fields.
func (r *Replica) truthStatus(row *schema.Replica) {
	if m := r.MissTokens(); len(m) > 0 {
		row.MissTokens = m
	}
	if !r.kv.cfg.On() {
		return
	}
	st := r.kv.ledger.Stats()
	row.LedgerBlocks, row.LedgerConversations = st.Blocks+st.HostBlocks, st.Sessions
	switch {
	case r.kv.silent.Load():
		row.KVEvents = "silent"
	case r.truthLive():
		row.KVEvents = "live"
	default:
		row.KVEvents = "joining"
	}
}
