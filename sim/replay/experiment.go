package replay

import (
	"slices"

	"github.com/lmwarden/warden/router/place"
)

// override is the Placer's Override: the load's imposed homes and the
// conversation slots (quantum) on top of the policy's decision, for the
// request being routed; a hold is ReasonWait.
func (p *replay) override(_ place.Request, d place.Decision, snap []place.ReplicaView, sv place.SessionView) place.Decision {
	q := p.cur
	if p.load.home != nil && !sv.Known {
		d = place.Decision{Rank: p.load.home(q.s.k), Reason: place.ReasonNew}
	}
	if d.Reason == place.ReasonWait {
		if p.debug != nil && !slices.Contains(p.held, q) {
			p.debug("t=%.1f wait %+v snap %+v", p.t, sv, snap)
		}
		return d
	}
	if d.Rank < 0 || p.load.quantum <= 0 {
		return d
	}
	if p.load.anySlot && !p.admitQuantum(q.s, d.Rank) {
		// It yielded its slot, so its prefix is probably evicted at home:
		// any replica's free slot serves it as well (a move).
		for i := range p.eng {
			if p.admitQuantum(q.s, i) {
				if sv.Known && i != sv.Home {
					d = place.Decision{Rank: i, Reason: place.ReasonMove}
				} else {
					d.Rank = i
				}
				break
			}
		}
	}
	if p.load.maxHold > 0 && p.t-q.arrive >= p.load.maxHold {
		p.forceQuantum(q.s, d.Rank) // waited long enough: admitted over the slots
	}
	if !p.admitQuantum(q.s, d.Rank) {
		return place.Decision{Rank: -1, Reason: place.ReasonWait}
	}
	return d
}

// admitQuantum: s may send a turn to rank when it holds one of the
// replica's slots or a slot is free (it takes it).
func (p *replay) admitQuantum(s *rSession, rank int) bool {
	if p.run == nil {
		p.run = make([]map[*rSession]int, len(p.eng))
		for i := range p.run {
			p.run[i] = map[*rSession]int{}
		}
	}
	if _, ok := p.run[rank][s]; ok {
		return true
	}
	if len(p.run[rank]) >= p.load.slots {
		return false
	}
	for i := range p.run {
		delete(p.run[i], s)
	}
	p.run[rank][s] = 0
	return true
}

// forceQuantum gives s a slot on rank beyond the replica's count.
func (p *replay) forceQuantum(s *rSession, rank int) {
	p.admitQuantum(s, rank) // allocates the sets
	for i := range p.run {
		delete(p.run[i], s)
	}
	p.run[rank][s] = 0
}

// yieldQuantum counts a finished turn of s on rank; s gives up its slot
// when it ended, or when its quantum is used and another conversation
// waits for the replica.
func (p *replay) yieldQuantum(s *rSession, rank int, ended bool) {
	if p.run == nil {
		return
	}
	if ended {
		delete(p.run[rank], s)
		return
	}
	if _, ok := p.run[rank][s]; !ok {
		return
	}
	p.run[rank][s]++
	if p.run[rank][s] < p.load.quantum {
		return
	}
	for _, q := range p.held {
		if !q.s.homeKnown || q.s.home == rank {
			delete(p.run[rank], s)
			return
		}
	}
	p.run[rank][s] = 0 // nobody waits: a new quantum
}
