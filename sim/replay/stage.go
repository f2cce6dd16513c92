package replay

import (
	"math"
	"slices"
)

// openStage resets the per-stage accumulators and grows the session pool.
func (p *replay) openStage() {
	p.res = replayResult{repWait: make([]float64, len(p.eng)), repSess: make([]float64, len(p.eng))}
	p.ttfb, p.all, p.samples, p.repCount = nil, nil, 0, nil
	p.winStart = p.t
	p.hq = p.counters()
	if sp := p.load.stagePolicy; p.stageIdx < len(sp) && sp[p.stageIdx] != "" {
		p.placer.SetPolicy(sp[p.stageIdx])
	}
	for p.workers < p.load.stages[p.stageIdx] {
		p.startSession(p.workers)
		p.workers++
	}
}

func (p *replay) counters() [3]int64 {
	var c [3]int64
	for _, e := range p.eng {
		c[0] += e.sched.Counters.PrefixHits
		c[1] += e.sched.Counters.PrefixQueries
		c[2] += e.sched.Counters.Preemptions
	}
	return c
}

// closeStage computes the stage's row.
func (p *replay) closeStage() {
	c := p.counters()
	p.res.hitPct = 100 * float64(c[0]-p.hq[0]) / math.Max(1, float64(c[1]-p.hq[1]))
	p.res.preempt = c[2] - p.hq[2]
	for _, q := range p.held {
		p.all = append(p.all, p.t-q.submit)
	}
	p.results = append(p.results, p.finish())
}

func (p *replay) repN(rank int) {
	if p.repCount == nil {
		p.repCount = make([]int, len(p.eng))
	}
	p.repCount[rank]++
}

func (p *replay) finish() replayResult {
	r := p.res
	slices.Sort(p.ttfb)
	if len(p.ttfb) > 0 {
		r.p50, r.p95 = quantileF(p.ttfb, 0.5), quantileF(p.ttfb, 0.95)
	}
	slices.Sort(p.all)
	if len(p.all) > 0 {
		r.p95all = quantileF(p.all, 0.95)
	}
	r.outPerMin = r.outPerMin * 60 / p.load.stage
	for i := range r.repWait {
		if p.repCount != nil && p.repCount[i] > 0 {
			r.repWait[i] /= float64(p.repCount[i])
		}
		r.repSess[i] /= math.Max(1, float64(p.samples))
	}
	r.running /= math.Max(1, float64(p.samples))
	r.waiting /= math.Max(1, float64(p.samples))
	r.busy /= math.Max(1, float64(p.samples))
	return r
}

func quantileF(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	return xs[lo] + (pos-float64(lo))*(xs[hi]-xs[lo])
}
