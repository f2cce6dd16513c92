package model

// The model's test fixtures: token runs, schedulers of the sizes the tests
// use, one step of a scheduler, and a virtual-clock engine (vEngine) that
// drives a Scheduler as Engine does, without wall time.

const english = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, " +
	"and the clocks were striking thirteen. Call me Ishmael; some years ago, never mind how long precisely."

// tokens returns n distinct tokens starting at base (so different bases
// never share a block hash).
func tokens(base, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(base*100000 + i)
	}
	return t
}

func newTestSched(numBlocks, budget, maxSeqs int, mutate ...func(*SchedConfig)) *Scheduler {
	cfg := SchedConfig{MaxNumSeqs: maxSeqs, MaxBatchedTokens: budget, MaxModelLen: 1 << 20, BlockSize: 4,
		ReserveFullISL: true, PrefixStats: StatsAdmission}
	for _, m := range mutate {
		m(&cfg)
	}
	return NewScheduler(cfg, NewBlockPool(numBlocks))
}

func ids(qs []*Seq) []uint64 {
	out := []uint64{}
	for _, q := range qs {
		out = append(out, q.ID)
	}
	return out
}

// step runs one Schedule + Complete with a fixed next token.
func step(s *Scheduler) Batch {
	b := s.Schedule()
	s.Complete(b, func(*Seq) uint32 { return 7 })
	return b
}

// vEngine drives a Scheduler on a virtual clock, step by step as
// Engine.stepWithHost does (and, without the tier, as Engine.Run does):
// the step's start goes to SetNow, its end to StepEnd, and a step with
// nothing to compute while transfers are in flight waits for the next one.
type vEngine struct {
	s     *Scheduler
	p     Profile
	t     float64
	sub   map[*Seq]float64
	first map[*Seq]float64
	tok   uint32
	steps []StepCost
	done  func(q *Seq) // called when a request finishes, at v.t
}

func newVEngine(s *Scheduler, p Profile) *vEngine {
	return &vEngine{s: s, p: p, sub: map[*Seq]float64{}, first: map[*Seq]float64{}, tok: 4e9}
}

func (v *vEngine) add(q *Seq) {
	v.s.Add(q)
	v.sub[q] = v.t
}

// step runs one iteration; false when the scheduler is idle.
func (v *vEngine) step() bool {
	if v.s.Idle() {
		return false
	}
	v.s.SetNow(v.t)
	b := v.s.Schedule()
	if len(b.Items) == 0 && v.s.HasHostTier() {
		v.s.StepEnd(v.t)
		if next, ok := v.s.NextHostEvent(); ok {
			v.t = next
			return true
		}
		if v.s.Idle() {
			return true
		}
	}
	c := b.Cost()
	v.steps = append(v.steps, c)
	v.t += v.p.StepSeconds(c)
	v.s.StepEnd(v.t)
	emitted, finished := v.s.Complete(b, func(*Seq) uint32 { v.tok++; return v.tok })
	for _, q := range emitted {
		if q.Output == 1 {
			v.first[q] = v.t
		}
	}
	for _, q := range finished {
		if v.done != nil {
			v.done(q)
		}
	}
	return true
}

func (v *vEngine) drain() {
	for v.step() {
	}
}

// ttft is a request's first-token time less its submission.
func (v *vEngine) ttft(q *Seq) float64 { return v.first[q] - v.sub[q] }

// a4000Sched is one replica of the reference rig's scheduler (block 16,
// 2048-token steps, 32 sequences) with kvBlocks GPU blocks and a host tier
// of hostGiB (0: none).
func a4000Sched(p Profile, kvBlocks int, hostGiB float64) *Scheduler {
	return NewScheduler(SchedConfig{MaxNumSeqs: 32, MaxBatchedTokens: 2048, MaxModelLen: (kvBlocks - 1) * 16, BlockSize: 16,
		ReserveFullISL: true, PrefixStats: StatsAdmission, Host: HostTier(hostGiB, p, 16)}, NewBlockPool(kvBlocks))
}

// smallSched is a block-4 scheduler with a host tier of hostBlocks whose
// transfers take loadSec a block.
func smallSched(gpuBlocks, hostBlocks int, loadSec float64) *vEngine {
	s := newTestSched(gpuBlocks, 1000, 8, func(c *SchedConfig) {
		c.Host = HostConfig{Blocks: hostBlocks, BlockBytes: 1, BlockSeconds: loadSec, Workers: 1}
	})
	return newVEngine(s, Profile{T0: 1e-3, DecodeGBps: 1})
}

// hostHas reports which of q's full blocks are in the host pool.
func hostHas(s *Scheduler, q *Seq) []bool {
	var out []bool
	for _, h := range q.hashes {
		_, ok := s.host.pool.chunks[h]
		out = append(out, ok)
	}
	return out
}

func run(v *vEngine, qs ...*Seq) {
	for _, q := range qs {
		v.add(q)
		v.drain()
		v.t += 1
	}
}
