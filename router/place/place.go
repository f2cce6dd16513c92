// Package place decides where a request goes: the placement policies as
// pure functions of a snapshot of the replicas and the request's
// conversation (Pick), the memory the adaptive policy learns from the
// requests that ended (Memory), the session table (Table), and their one
// owner, Placer, which keeps them under its own lock with the rest of the
// decision state and makes a decision and its in-flight increment in one
// critical section. Pick, Memory and Table read no clock, lock,
// environment or I/O; the Placer reads time only from its injected clock
// (a held request's one-second recheck is a real timer) and removes idle
// sessions on its tick (Tick), never in a read (Counts). Of the project it
// imports only internal/ilist (the session table's intrusive list); the
// router core (package router) and the replay (sim/replay) import it.
package place

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
)

// Reason says why a request went where it went (the X-Warden-Route header).
type Reason string

// Placement reasons.
const (
	ReasonNew      Reason = "new"      // first turn of a conversation, least-loaded replica
	ReasonSticky   Reason = "sticky"   // a known conversation stayed on its home
	ReasonSpill    Reason = "spill"    // home over the spill threshold: this request went elsewhere
	ReasonPinned   Reason = "pinned"   // the client pinned it (X-Warden-Replica)
	ReasonFailover Reason = "failover" // home unavailable: the conversation was re-homed
	ReasonOff      Reason = "off"      // a non-affinity balancer placed it
	ReasonHash     Reason = "hash"     // session hash to a replica
	ReasonNone     Reason = "none"     // no replica can take it
	ReasonWait     Reason = "wait"     // no replica has room: the Placer holds it and asks again (adaptive)
	ReasonMove     Reason = "move"     // re-homed where it is expected to be served sooner (adaptive)
)

// Policy names accepted by Config.Policy and POST /warden/policy.
const (
	PolicySticky        = "sticky"         // the seed rule: least-loaded new, sticky, spill, failover
	PolicyOff           = "off"            // vLLM's DP balancer up to 0.26: 4*waiting+running, stale stats
	PolicyOffV2         = "off-v2"         // vLLM's DP balancer from 0.27 (0.32's): max(in flight, waiting+running) + a KV-use penalty
	PolicyLeastInFlight = "least-inflight" // exact, fresh least-in-flight (accidentally sticky at low load)
	PolicyHash          = "hash"           // session hash to a replica (failed in practice; for comparison)
	PolicyAdaptive      = "adaptive"       // the default: KV-aware admission, stay-or-move by cost (adaptive.go)
)

// ReplicaView is one replica as a placement sees it: a copy, taken in the
// Placer's critical section, of the exact in-flight count and the latest
// scraped engine state.
type ReplicaView struct {
	Rank           int
	Healthy        bool    // launcher says up and health/scrape OK
	InFlight       int     // ours, exact, fresh
	Running        float64 // engine gauge, latest scrape
	Waiting        float64 // engine gauge, latest scrape
	KVUsed         float64 // 0..1, latest scrape
	ActiveSessions int     // conversations whose home this is
	MaxNumSeqs     int     // 0 = unknown
	KVCapacity     int     // tokens, 0 = unknown
	// HostKVTokens is the replica's host-RAM KV tier (vLLM's KV offloading):
	// prefix blocks evicted from the GPU stay there and load back over PCIe
	// instead of being prefilled again. Tokens; 0 = no tier; HostKVUnknown
	// = a tier of unknown size (taken as ample).
	HostKVTokens int

	// What vLLM's DP balancer sees: running/waiting as of the last periodic
	// stats refresh (about every 100 ms), and requests sent here since then.
	StaleRunning, StaleWaiting, SentSince int

	// The adaptive policy's estimates (Memory.FillView), in tokens and in
	// seconds of the Placer's clock; zero when unknown.
	WorkingSet         int     // KV the conversations active here need: shared prefix once + their contexts
	Active             int     // conversations active here (in flight or just finished)
	Homed              int     // conversations placed here under the current policy (new, moved, failed over)
	TurnSeconds        float64 // mean request duration here
	WaitSeconds        float64 // mean time to first byte here
	PrefillSecPerToken float64 // measured prefill cost per computed prompt token

	// For new placements: Stale says its engine metrics are out of date (it
	// counts as busy: chosen only when every replica's are); Ramp in (0, 1]
	// says it re-entered the rotation recently, the share of its ramp-up
	// still ahead: its load counts as at least Ramp x the others' mean, so it
	// fills gradually instead of taking every new conversation at once.
	Stale bool
	Ramp  float64
}

// HostKVUnknown marks a host KV tier whose size in tokens is not known yet.
const HostKVUnknown = -1

// ResidentCapacity is the tokens of prefix a replica keeps cheap to resume:
// its GPU KV capacity plus its host tier (a tier of unknown size counts as
// eight GPU caches; the warden's auto sizing gives tens of GiB against a
// card's few). 0 when the GPU capacity is unknown.
func (r ReplicaView) ResidentCapacity() int {
	switch {
	case r.KVCapacity <= 0:
		return 0
	case r.HostKVTokens == HostKVUnknown:
		return 9 * r.KVCapacity
	}
	return r.KVCapacity + max(r.HostKVTokens, 0)
}

// Available is the one eligibility predicate every policy uses.
func (r ReplicaView) Available() bool { return r.Healthy }

// SessionView is what placement knows about the request's conversation.
type SessionView struct {
	Key    string // "" = no session identified
	Known  bool   // the session table has a live entry
	Home   int    // its home rank when Known
	Pinned bool   // the client pinned the request to Pin
	Pin    int

	// The adaptive policy's view (Memory.ViewSession).
	Tokens     int // expected prompt tokens of this request
	Footprint  int // KV tokens the conversation keeps beyond the shared prefix
	ResidentOn int // rank that probably still holds its prefix; -1 noDecision
	// ResidentTokens is what the engines' KV events say ResidentOn holds of
	// it beyond the prefix every conversation shares there (the system
	// prompt, resident elsewhere too), when ResidentKnown (else no events
	// there: the estimate's Footprint stands).
	ResidentTokens int
	ResidentKnown  bool
	TurnsSinceMove int     // turns since it last moved (large if never)
	Waited         float64 // seconds this request has already waited at the warden
	Held           int     // requests held at the warden now (ReasonWait)
	NoWait         bool    // the warden will not hold this request (any longer)

	adopted bool // the engines' truth gave it its home (applyTruth)

	// ScanStart is where the vLLM-style balancers start their scan of the
	// replicas (an index into the snapshot): vLLM 0.25 and later rotate it
	// by one after every routed request, so that ties do not always go to
	// the first engine (Placer keeps it).
	ScanStart int
}

// Config is the placement configuration: the policy and its knobs.
type Config struct {
	Policy         string
	SpillThreshold int // in-flight above which a sticky turn spills; 0 = auto

	// Adaptive policy knobs; zero values take the defaults.
	AdmitWait    float64 // seconds a new conversation may wait for room; 0 = AdmitTurns turn times, <0 = never wait
	MoveCooldown int     // turns a moved conversation stays put; 0 = DefaultMoveCooldown
	Fill         float64 // fraction of KV capacity a working set may use; 0 = DefaultFill
	AdmitTurns   float64 // mean turn times of the automatic AdmitWait; 0 = defaultAdmitTurns
	MaxOverflow  float64 // overload past which new conversations are no longer held; 0 = DefaultMaxOverflow
	AdmitSlack   float64 // overcommit of the roomiest replica admitted at once; 0 = DefaultAdmitSlack, <0 = none
}

// SpillFor returns the spill threshold for a replica: the configured one, or
// auto = max(1, max_num_seqs/4) (1 when max_num_seqs is unknown).
func (c Config) SpillFor(r ReplicaView) int {
	if c.SpillThreshold > 0 {
		return c.SpillThreshold
	}
	return max(1, r.MaxNumSeqs/4)
}

// Rand is the injected source of randomness for ties (math/rand/v2's
// *rand.Rand satisfies it).
type Rand interface{ IntN(n int) int }

// Decision is a placement's output. Rank is -1 when Reason is ReasonNone.
type Decision struct {
	Rank   int
	Reason Reason
}

var noDecision = Decision{Rank: -1, Reason: ReasonNone}

// policyFunc decides one request. It must be pure: no locks, clock,
// environment or I/O; everything it needs is in its arguments.
type policyFunc func(snap []ReplicaView, s SessionView, cfg Config, rng Rand) Decision

var policies = map[string]policyFunc{
	PolicySticky:        pickSticky,
	PolicyOff:           pickOffV1,
	PolicyOffV2:         pickOffV2,
	PolicyLeastInFlight: pickLeastInFlight,
	PolicyHash:          pickHash,
	PolicyAdaptive:      pickAdaptive,
}

// Policies lists the policy names, sorted.
func Policies() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ValidPolicy reports an error naming the choices for an unknown policy.
func ValidPolicy(name string) error {
	if _, ok := policies[name]; !ok {
		return fmt.Errorf("unknown policy %q (choose one of %v)", name, Policies())
	}
	return nil
}

// Pick places one request: a client pin first (under every policy), then
// the configured policy. It returns ReasonNone when no replica can take it.
func Pick(snap []ReplicaView, s SessionView, cfg Config, rng Rand) Decision {
	if s.Pinned {
		if i := indexOf(snap, s.Pin); i >= 0 && snap[i].Available() {
			return Decision{Rank: s.Pin, Reason: ReasonPinned}
		}
		return noDecision
	}
	f, ok := policies[cfg.Policy]
	if !ok {
		return noDecision
	}
	return f(snap, s, cfg, rng)
}

// pickSticky: a new conversation goes to the least-loaded replica; a known
// one stays home unless home is unavailable (failover: re-home) or over the
// spill threshold (this request spills to the least-loaded other replica if
// that one has fewer in flight; home does not change).
func pickSticky(snap []ReplicaView, s SessionView, cfg Config, rng Rand) Decision {
	home := -1
	if s.Known {
		home = indexOf(snap, s.Home)
	}
	if home < 0 || !snap[home].Available() {
		i := leastLoaded(snap, -1, rng)
		if i < 0 {
			return noDecision
		}
		if s.Known {
			return Decision{Rank: snap[i].Rank, Reason: ReasonFailover}
		}
		return Decision{Rank: snap[i].Rank, Reason: ReasonNew}
	}
	return spillOr(snap, home, cfg, rng, Decision{Rank: snap[home].Rank, Reason: ReasonSticky})
}

// spillOr applies the seed rule's break condition: a home over the spill
// threshold sends this one request to the least-loaded other replica when
// that one has fewer in flight; otherwise d.
func spillOr(snap []ReplicaView, home int, cfg Config, rng Rand, d Decision) Decision {
	h := snap[home]
	if h.InFlight > cfg.SpillFor(h) {
		if i := leastLoaded(snap, home, rng); i >= 0 && snap[i].InFlight < h.InFlight {
			return Decision{Rank: snap[i].Rank, Reason: ReasonSpill}
		}
	}
	return d
}

// load orders replicas for new conversations and spills: in-flight requests
// plus active conversations, then KV fill in 5% steps.
func load(r ReplicaView) (int, int) {
	return r.InFlight + r.ActiveSessions, int(r.KVUsed * 20)
}

// busyLoad is added to the load of a replica whose metrics are stale.
const busyLoad = 1 << 20

// admission adjusts the loads new placements compare: a stale replica
// counts as busy, a ramping one as at least Ramp x the mean load of the
// available replicas that are not ramping (the established ones; when all
// are ramping, as at start, none is adjusted).
type admission struct {
	sum, n  int
	ramping bool
}

func admissionOf(snap []ReplicaView, load func(ReplicaView) int) admission {
	var a admission
	for _, r := range snap {
		if !r.Available() {
			continue
		}
		if r.Ramp > 0 {
			a.ramping = true
			continue
		}
		a.sum += load(r)
		a.n++
	}
	return a
}

func (a admission) adjust(r ReplicaView, l int) int {
	adj := l
	if a.ramping && r.Ramp > 0 && a.n > 0 {
		established := float64(a.sum) / float64(a.n)
		adj = max(adj, int(min(r.Ramp, 1)*established)) // rounded down: it wins the ties at its share
	}
	if r.Stale {
		adj += busyLoad
	}
	return adj
}

// newLoad is load's first component, for admissionOf.
func newLoad(r ReplicaView) int { a, _ := load(r); return a }

// leastLoaded returns the index of the least-loaded available replica other
// than skip (an index, -1 for none), ties broken by rng; -1 if none.
func leastLoaded(snap []ReplicaView, skip int, rng Rand) int {
	var ties []int
	var best [2]int
	adm := admissionOf(snap, newLoad)
	for i, r := range snap {
		if i == skip || !r.Available() {
			continue
		}
		a, b := load(r)
		cur := [2]int{adm.adjust(r, a), b}
		switch {
		case ties == nil || less(cur, best):
			best, ties = cur, append(ties[:0], i)
		case cur == best:
			ties = append(ties, i)
		}
	}
	return pickTie(ties, rng)
}

func less(a, b [2]int) bool { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]) }

func pickTie(ties []int, rng Rand) int {
	switch len(ties) {
	case 0:
		return -1
	case 1:
		return ties[0]
	}
	return ties[rng.IntN(len(ties))]
}

// pickOffV1 models vLLM's own data-parallel load balancer up to 0.26
// (DPLBAsyncMPClient, v1/engine/core_client.py; the reference
// measurement's "off"): each engine scores 4*waiting + running from the
// coordinator's stats, which it republishes every 100 ms while they change,
// and each request sent since counts as waiting on the engine it went to
// (the client's local bump); the lowest score wins, strict <, scanning from
// a start that rotates by one per request (0.25 and later).
func pickOffV1(snap []ReplicaView, s SessionView, _ Config, _ Rand) Decision {
	return lowestScore(snap, s.ScanStart, func(r ReplicaView) float64 {
		return float64(4*(r.StaleWaiting+r.SentSince) + r.StaleRunning)
	})
}

// pickOffV2 models vLLM 0.27 to 0.33's balancer (v1/engine/core_client.py,
// 0.32.0 lines 1642-1697): max(client_count x in flight, waiting +
// running), plus waiting x 6 x max(0, KV use - 0.5) (a penalty on queued
// requests ramping from 0 at half the KV cache to 3x at a full one), one
// API-server client (client_count 1), the same local bump and rotating scan.
func pickOffV2(snap []ReplicaView, s SessionView, _ Config, _ Rand) Decision {
	return lowestScore(snap, s.ScanStart, func(r ReplicaView) float64 {
		waiting := float64(r.StaleWaiting + r.SentSince)
		score := max(float64(r.InFlight), waiting+float64(r.StaleRunning))
		if waiting > 0 {
			score += waiting * 6 * max(0, r.KVUsed-0.5)
		}
		return score
	})
}

// lowestScore is the available replica with the lowest score, scanning the
// snapshot from index start (wrapping): the first of equal scores wins.
func lowestScore(snap []ReplicaView, start int, score func(ReplicaView) float64) Decision {
	best, bestScore := -1, 0.0
	n := len(snap)
	for k := range n {
		i := (start%max(n, 1) + k) % n
		r := snap[i]
		if !r.Available() {
			continue
		}
		if s := score(r); best < 0 || s < bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return noDecision
	}
	return Decision{Rank: snap[best].Rank, Reason: ReasonOff}
}

// pickLeastInFlight sends each request to the replica with the fewest
// requests in flight right now (exact, fresh counts), random ties.
func pickLeastInFlight(snap []ReplicaView, _ SessionView, _ Config, rng Rand) Decision {
	var ties []int
	for i, r := range snap {
		if !r.Available() {
			continue
		}
		if len(ties) == 0 || r.InFlight < snap[ties[0]].InFlight {
			ties = append(ties[:0], i)
		} else if r.InFlight == snap[ties[0]].InFlight {
			ties = append(ties, i)
		}
	}
	if i := pickTie(ties, rng); i >= 0 {
		return Decision{Rank: snap[i].Rank, Reason: ReasonOff}
	}
	return noDecision
}

// pickHash hashes the session key to a replica, ignoring load (probing the
// next rank when that one is unavailable). Requests without a session go to
// the least-in-flight replica.
func pickHash(snap []ReplicaView, s SessionView, cfg Config, rng Rand) Decision {
	if s.Key == "" || len(snap) == 0 {
		d := pickLeastInFlight(snap, s, cfg, rng)
		if d.Reason == ReasonOff {
			d.Reason = ReasonHash
		}
		return d
	}
	h := fnv.New64a()
	h.Write([]byte(s.Key))
	start := int(h.Sum64() % uint64(len(snap)))
	for k := range snap {
		if r := snap[(start+k)%len(snap)]; r.Available() {
			return Decision{Rank: r.Rank, Reason: ReasonHash}
		}
	}
	return noDecision
}

func indexOf(snap []ReplicaView, rank int) int {
	return slices.IndexFunc(snap, func(r ReplicaView) bool { return r.Rank == rank })
}
