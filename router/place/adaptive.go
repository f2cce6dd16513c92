package place

// The adaptive policy (PolicyAdaptive, the default). It keeps each
// conversation's working set, not just its key, in view:
//
//   - Room. A replica has room for a conversation when the KV its active
//     conversations need (ReplicaView.WorkingSet: their contexts beyond the
//     shared prefix, which counts once, estimated from the engines' usage
//     reports) plus this one's footprint stays within a fill fraction of its
//     KV capacity. Beyond that, conversations evict each other's prefixes
//     and every turn is prefilled again (the overload of the reference
//     measurement).
//   - Admission. A new conversation goes to the least-loaded replica among
//     those with room; failing that, to the one with the most room if it
//     overcommits that one by at most AdmitSlack. Otherwise it waits at the
//     warden (ReasonWait; the Placer asks again when a request ends) for at
//     most AdmitWait — a bounded first-turn wait instead of evicting the
//     working sets of running conversations — but only while the overflow
//     is small (MaxOverflow); past the bound, or at a deeper overload, it
//     goes to the least-loaded replica as under the seed rule.
//   - Stay or move. A known conversation moves when waiting at home costs
//     more than its cache there is worth: on an overcommitted home, when the
//     expected queue wait at home exceeds the expected wait on a replica with
//     room plus the re-prefill its move costs (nothing when its prefix is
//     probably gone from home anyway); on a home with room, when the time
//     to first byte measured at home exceeds the one measured elsewhere plus
//     that re-prefill, at the replicas' measured prefill rate (balanceOr).
//     So it behaves like stickiness where prefill is dear and like
//     balancing where it is cheap. A move re-homes it, and a moved
//     conversation stays put for MoveCooldown turns (hysteresis).
//   - A host KV tier (ReplicaView.HostKVTokens) adds to a replica's room:
//     a prefix evicted from the GPU stays there and resumes by a reload, so
//     a conversation's prefix counts as resident at home within GPU + tier
//     (ReplicaView.ResidentCapacity), a move costs its full re-prefill, and
//     new conversations wait only when GPU and tier together are full.
//   - Spill and failover as the seed rule; without KV capacity (an engine that does
//     not export vllm:cache_config_info) it degrades to the sticky rule.

// Adaptive policy defaults (Config zero values).
const (
	defaultAdmitTurns   = 5.0  // AdmitWait = this many mean turn times when 0
	DefaultMoveCooldown = 3    // turns a moved conversation stays put
	DefaultFill         = 1.0  // fraction of KV capacity a working set may use
	DefaultMaxOverflow  = 0.25 // see Config.maxOverflow
	DefaultAdmitSlack   = 0.05 // see Config.admitSlack
	moveMargin          = 1.25 // a move must win by this factor (hysteresis on cost)
)

// maxOverflow (Config.MaxOverflow): when the conversations that want KV
// (active and held) need more than 1+maxOverflow times the replicas' room,
// holding stops and the
// engines share the overload as under the sticky rule. By Little's law a
// held conversation waits about overflow x a conversation's life: beyond a
// quarter of it, the first-turn waits cost more TTFB p95 than the thrash
// they avoid (docs/router.md).
func (c Config) maxOverflow() float64 {
	if c.MaxOverflow > 0 {
		return c.MaxOverflow
	}
	return DefaultMaxOverflow
}

// overflow is the fraction by which the active and held conversations'
// working sets exceed the available replicas' room (held ones counted
// with this conversation's footprint).
func overflow(snap []ReplicaView, s SessionView, fill float64) float64 {
	demand, capacity := float64((s.Held+1)*s.Footprint), 0.0
	for _, r := range snap {
		if r.Available() && r.KVCapacity > 0 {
			demand += float64(r.WorkingSet)
			capacity += fill * float64(r.ResidentCapacity())
		}
	}
	if capacity == 0 {
		return 0
	}
	return demand/capacity - 1
}

func (c Config) admitTurns() float64 {
	if c.AdmitTurns > 0 {
		return c.AdmitTurns
	}
	return defaultAdmitTurns
}

// FillFraction is the configured fill fraction or the default.
func (c Config) FillFraction() float64 {
	if c.Fill > 0 && c.Fill <= 4 {
		return c.Fill
	}
	return DefaultFill
}

// admitWait is the bound on a new conversation's wait at the warden in
// seconds: the configured one, or defaultAdmitTurns mean turn times.
func (c Config) admitWait(snap []ReplicaView) float64 {
	if c.AdmitWait != 0 {
		return max(c.AdmitWait, 0)
	}
	sum, n := 0.0, 0
	for _, r := range snap {
		if r.Available() && r.TurnSeconds > 0 {
			sum += r.TurnSeconds
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return c.admitTurns() * sum / float64(n)
}

// room is the KV a replica has left for one more conversation (tokens; can
// be negative). ok is false when the capacity is unknown.
func room(r ReplicaView, fill float64) (int, bool) {
	if r.KVCapacity <= 0 {
		return 0, false
	}
	return int(fill*float64(r.ResidentCapacity())) - r.WorkingSet, true
}

func pickAdaptive(snap []ReplicaView, s SessionView, cfg Config, rng Rand) Decision {
	if !capacityKnown(snap) {
		return pickSticky(snap, s, cfg, rng)
	}
	home := -1
	if s.Known {
		home = indexOf(snap, s.Home)
	}
	if home >= 0 && snap[home].Available() {
		return stayOrMove(snap, home, s, cfg, rng)
	}
	reason := ReasonNew
	if s.Known {
		reason = ReasonFailover
	}
	fill := cfg.FillFraction()
	if i := leastLoadedWith(snap, -1, s.Footprint, fill, rng); i >= 0 {
		return Decision{Rank: snap[i].Rank, Reason: reason}
	}
	if cfg.admitSlack() > 0 {
		if i := mostRoom(snap, s.Footprint, fill, cfg.admitSlack()); i >= 0 {
			return Decision{Rank: snap[i].Rank, Reason: reason}
		}
	}
	if !s.Known && s.Key != "" && !s.NoWait && shouldWait(snap, s, cfg) {
		return Decision{Rank: -1, Reason: ReasonWait}
	}
	// Overload beyond what holding can fix: the engines share it as under
	// the seed rule.
	if i := leastLoadedWith(snap, -1, -1<<40, fill, rng); i >= 0 {
		return Decision{Rank: snap[i].Rank, Reason: reason}
	}
	return noDecision
}

// homedLoad is the adaptive policy's load of a replica for new placements.
func homedLoad(r ReplicaView) int { return r.InFlight + r.Homed }

// leastLoadedWith is the least-loaded available replica other than skip
// that has room for footprint tokens (-1 if none has; a very negative
// footprint admits every replica). Load is the seed rule's order (in
// flight + conversations homed there, then KV fill) with homes counted
// only since the policy became adaptive: conversations placed under
// another policy do not steer it (docs/calibration.md §5).
func leastLoadedWith(snap []ReplicaView, skip, footprint int, fill float64, rng Rand) int {
	var ties []int
	var best [2]int
	adm := admissionOf(snap, homedLoad)
	for i, r := range snap {
		if left, ok := room(r, fill); i == skip || !r.Available() || (ok && left < footprint) {
			continue
		}
		cur := [2]int{adm.adjust(r, homedLoad(r)), int(r.KVUsed * 20)}
		switch {
		case ties == nil || less(cur, best):
			best, ties = cur, append(ties[:0], i)
		case cur == best:
			ties = append(ties, i)
		}
	}
	return pickTie(ties, rng)
}

// shouldWait: a new conversation without room waits while its wait is
// under the bound and something is in flight (an end can make room). Before
// any turn time is known the bound is open: the first ends set it.
func shouldWait(snap []ReplicaView, s SessionView, cfg Config) bool {
	busy := false
	for _, r := range snap {
		busy = busy || (r.Available() && r.InFlight > 0)
	}
	if !busy {
		return false
	}
	if overflow(snap, s, cfg.FillFraction()) > cfg.maxOverflow() {
		return false
	}
	bound := cfg.admitWait(snap)
	return s.Waited < bound || (bound == 0 && cfg.AdmitWait == 0)
}

// capacityKnown: some available replica exports its KV capacity.
func capacityKnown(snap []ReplicaView) bool {
	for _, r := range snap {
		if r.Available() && r.KVCapacity > 0 {
			return true
		}
	}
	return false
}

// stayOrMove keeps a conversation home unless its home is overcommitted
// and moving wins on expected time (see the file comment).
func stayOrMove(snap []ReplicaView, home int, s SessionView, cfg Config, rng Rand) Decision {
	h := snap[home]
	fill := cfg.FillFraction()
	stay := Decision{Rank: h.Rank, Reason: ReasonSticky}
	left, ok := room(h, fill)
	if !ok || s.TurnsSinceMove < cfg.Cooldown() {
		return spillOr(snap, home, cfg, rng, stay)
	}
	if left >= 0 {
		return balanceOr(snap, home, s, cfg, rng, stay)
	}
	i := leastLoadedWith(snap, home, s.Footprint, fill, rng)
	if i < 0 {
		return spillOr(snap, home, cfg, rng, stay)
	}
	r := snap[i]
	reprefill := float64(s.atStake(h.Rank)) * prefillRate(h, r)
	if waitAt(h) > moveMargin*(waitAt(r)+reprefill) {
		return Decision{Rank: r.Rank, Reason: ReasonMove}
	}
	return spillOr(snap, home, cfg, rng, stay)
}

// balanceOr moves a conversation whose home has room off it when waiting
// there costs more than its cache is worth: the time to first byte
// measured at home exceeds, by moveMargin, the one measured on the
// least-loaded other replica with room plus the re-prefill a move costs
// there (its footprint at that replica's measured prefill rate; nothing
// when its prefix is probably gone from home anyway), half the gap
// exceeds twice that re-prefill, and home has more requests in flight than
// that replica now. Where prefill is dear
// (the reference rig: ~1.8 s for a 10k-token context) the waits must differ
// by seconds, so conversations stay as under the sticky rule; where it is
// cheap (a small model on CPU cores: ~30 ms for 1k tokens) a small
// imbalance moves them, as a balancer would. Else spillOr.
func balanceOr(snap []ReplicaView, home int, s SessionView, cfg Config, rng Rand, stay Decision) Decision {
	h := snap[home]
	i := leastLoadedWith(snap, home, s.Footprint, cfg.FillFraction(), rng)
	if i < 0 || h.WaitSeconds <= 0 || snap[i].WaitSeconds <= 0 {
		return spillOr(snap, home, cfg, rng, stay)
	}
	r := snap[i]
	// The times to first byte are history; the move needs home busier now
	// than the other, or an idle home would lose its conversations to a
	// replica that once answered faster (a long prompt at home, a short one
	// there).
	if h.InFlight <= r.InFlight {
		return spillOr(snap, home, cfg, rng, stay)
	}
	reprefill := float64(s.atStake(h.Rank)) * prefillRate(h, r)
	// Moving one conversation closes about half the gap (home gets lighter,
	// the other heavier), and its re-prefill is paid twice: by the mover and
	// by the conversations it delays there. So the move pays when half the
	// gap exceeds twice the re-prefill.
	if h.WaitSeconds > moveMargin*(r.WaitSeconds+reprefill) && (h.WaitSeconds-r.WaitSeconds)/2 > 2*reprefill {
		return Decision{Rank: r.Rank, Reason: ReasonMove}
	}
	return spillOr(snap, home, cfg, rng, stay)
}

// Cooldown is the configured move cooldown in turns or the default.
func (c Config) Cooldown() int {
	if c.MoveCooldown > 0 {
		return c.MoveCooldown
	}
	return DefaultMoveCooldown
}

// waitAt is the expected queue wait of one more request on r: the measured
// time to first byte there, scaled by how far its working set is over its
// capacity (turns queue for KV to free up).
func waitAt(r ReplicaView) float64 {
	w := r.WaitSeconds
	if r.KVCapacity > 0 && r.WorkingSet > r.KVCapacity {
		w *= float64(r.WorkingSet) / float64(r.KVCapacity)
	}
	return w
}

// prefillRate is the measured seconds per prefilled token (either replica's
// measurement; a large value when none is known, so that moves need proof).
func prefillRate(a, b ReplicaView) float64 {
	switch {
	case b.PrefillSecPerToken > 0:
		return b.PrefillSecPerToken
	case a.PrefillSecPerToken > 0:
		return a.PrefillSecPerToken
	}
	return 1
}

// admitSlack (Config.AdmitSlack): a new conversation that fits nowhere still goes to the replica
// with the most room when it overcommits that replica by at most this share
// of its KV capacity, instead of waiting for a conversation to end. Working
// sets are estimated at their peak and not all of a replica's conversations
// peak at once, so a few per cent over costs the engine little; holding
// costs the first turn the wait (docs/router.md, addendum 2: on the
// reference load at 16 sessions, holding at ~4 % over put 4-5 s on the p95).
func (c Config) admitSlack() float64 {
	switch {
	case c.AdmitSlack > 0:
		return c.AdmitSlack
	case c.AdmitSlack < 0:
		return 0
	}
	return DefaultAdmitSlack
}

// mostRoom is the available replica with the most room left, if this
// conversation's footprint overcommits it by at most slack of its capacity.
func mostRoom(snap []ReplicaView, footprint int, fill, slack float64) int {
	best, bestLeft := -1, 0
	for i, r := range snap {
		left, ok := room(r, fill)
		if !r.Available() || !ok {
			continue
		}
		if float64(footprint-left) > slack*float64(r.ResidentCapacity()) {
			continue
		}
		if best < 0 || left > bestLeft {
			best, bestLeft = i, left
		}
	}
	return best
}

// atStake is the tokens a move off home would compute again: the
// conversation's footprint when its prefix is resident there (the
// engines' own count beyond the shared prefix where their KV events say,
// SessionView.ResidentTokens), nothing when it is not.
func (s SessionView) atStake(home int) int {
	switch {
	case s.ResidentOn != home:
		return 0
	case s.ResidentKnown:
		return min(s.Footprint, s.ResidentTokens)
	}
	return s.Footprint
}
