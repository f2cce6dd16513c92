package router

import (
	"sync"

	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/schema"
)

// peakState is the worst KV overcommit seen so far.
type peakState struct {
	mu     sync.Mutex
	peak   *schema.OvercommitPeak
	warned bool // the current overcommit has been logged
}

// Status returns a consistent snapshot of the core for the panel, the
// status JSON, the Prometheus collector and the exit summary.
func (c *Core) Status() schema.Status {
	now := c.clock()
	reps := c.Replicas()
	ranks := make([]int, len(reps))
	for i, r := range reps {
		ranks[i] = r.rank
	}
	n := c.placer.Counts(now, ranks)
	s := schema.Status{
		Since: c.since, Now: now, UptimeSeconds: now.Sub(c.since).Seconds(), Model: c.cfg.ServedModel,
		Policy: n.Policy, Affinity: affinity(n.Policy), SpillAuto: c.cfg.SpillThreshold == 0,
		Sessions: n.Sessions, SessionsSeen: n.Seen,
		ActiveContextTokens: n.ContextSum, ActiveContextSessions: n.ContextN,
		ConcurrentSessions: n.Concurrent, ActiveWindowSeconds: n.ActiveWindow.Seconds(),
		SubagentSessions: n.SubagentSessions, SubagentsSeen: n.SubagentsSeen,
		Engines: c.cfg.Engines, EngineTimeScale: c.EngineTimeScale(),
	}
	if n.KnownTurns > 0 {
		s.StickyShare = float64(n.HomeTurns) / float64(n.KnownTurns)
	}
	active, sub := n.Active, n.Subagents

	for i, r := range reps {
		row := r.status(active[i])
		row.ActiveSubagents = sub[i]
		s.Replicas = append(s.Replicas, row)
		s.InFlight += row.InFlight
	}
	s.Totals = schema.TotalsOf(s.Replicas)
	for _, r := range s.Replicas {
		for k, v := range r.MissTokens {
			if s.MissTokens == nil {
				s.MissTokens = map[string]uint64{}
			}
			s.MissTokens[k] += v
		}
	}
	s.MaxModelLen = schema.SmallestContext(s.Replicas)
	if len(reps) > 0 {
		s.SpillThreshold = place.Config{SpillThreshold: c.cfg.SpillThreshold}.SpillFor(place.ReplicaView{MaxNumSeqs: reps[0].seqs()})
	}
	s.Series = c.series.points(now)
	c.peak.mu.Lock()
	c.peak.peak = panel.UpdatePeak(c.peak.peak, s)
	s.PeakOvercommit = c.peak.peak
	c.peak.mu.Unlock()
	if msg, over := panel.Overcommit(s); over {
		s.Warnings = append(s.Warnings, msg)
	}
	return s
}

// affinity reports whether a policy keeps conversations on a replica.
func affinity(policy string) bool {
	return policy == place.PolicySticky || policy == place.PolicyHash || policy == place.PolicyAdaptive
}

// status is the replica's panel row.
func (r *Replica) status(active int) schema.Replica {
	row := schema.Replica{
		Rank: r.rank, GPUs: r.gpus, URL: r.target.String(), Port: r.port(), MaxNumSeqs: r.seqs(),
		MaxModelLen: int(r.maxModelLen.Load()),
		InFlight:    int(r.inflight.Load()), Requests: r.requests.Load(), New: r.newTurns.Load(),
		Sticky: r.sticky.Load(), SpilledIn: r.spilledIn.Load(), Pinned: r.pinned.Load(),
		Failover: r.failover.Load(), Balanced: r.balanced.Load(), Errors: r.errors.Load(),
		ActiveSessions: active, PromptTokens: r.prompt.Load(), CachedTokens: r.cached.Load(),
		CompletionTokens: r.completion.Load(),
	}
	if r.spec.DPPinned {
		d := r.spec.DPRank
		row.DPRank = &d
	}
	row.State, row.Up = r.health.Display()
	r.mu.Lock()
	row.Restarts, row.LastCrash = r.restarts, r.lastCrash
	e := r.eng.Stats()
	r.mu.Unlock()
	row.Running, row.Waiting, row.KVUsed, row.KVCapacityTokens = e.Running, e.Waiting, e.KVUsed, e.KVCapacity
	row.PrefixQueries, row.PrefixHits = e.Queries, e.Hits
	if row.PrefixQueries > 0 {
		row.HitRate = row.PrefixHits / row.PrefixQueries
	}
	row.EnginePrompt, row.EngineGenerated, row.Preemptions = e.Prompt, e.Generated, e.Preemptions
	row.OffloadBackend, row.OffloadBytes = e.Offload.Backend, e.Offload.Bytes
	row.OffloadQueries, row.OffloadHits = e.OffloadQueries, e.OffloadHits
	if row.OffloadQueries > 0 {
		row.OffloadHitRate = row.OffloadHits / row.OffloadQueries
	}
	row.OffloadLoadedBytes, row.OffloadStoredBytes = e.OffloadLoadedBytes, e.OffloadStoredBytes
	if row.HasOffload() {
		row.OffloadFilled = e.OffloadFilled()
	}
	row.ScrapedAt, row.ScrapeError = e.ScrapedAt, e.ScrapeErr
	r.truthStatus(&row)
	return row
}

// housekeep logs a KV overcommit when it starts (idle sessions expire on
// the Placer's tick, which Run starts).
func (c *Core) housekeep() {
	s := c.Status()
	msg, over := panel.Overcommit(s)
	c.peak.mu.Lock()
	warn := over && !c.peak.warned
	c.peak.warned = over
	c.peak.mu.Unlock()
	if warn {
		c.log.Warn(msg)
	}
}
