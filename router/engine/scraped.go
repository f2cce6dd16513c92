package engine

import (
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/promtext"
	mn "github.com/lmwarden/warden/router/metricname"
)

// MaxMetricsBytes bounds one /metrics response.
const MaxMetricsBytes = 8 << 20

// Scraped is what the latest scrapes of an engine's /metrics said.
// Counters are kept as deltas since the first scrape (warden start), with
// counter resets (engine restarts) handled. It has no lock of its own: its
// owner (the core's replica) guards it.
type Scraped struct {
	running, waiting, kvUsed float64
	kvCapacity               int
	queries, hits            counter
	prompt, generated        counter
	preemptions              counter
	offload                  Offload // the host KV tier's configuration, when the engine has one
	timeScale                float64 // the simulator's time scale; 0 = real time
	offQueries, offHits      counter // vllm:external_prefix_cache_queries / _hits
	offLoaded, offStored     counter // vllm:kv_offload_load_bytes / _store_bytes
	scrapedAt                time.Time
	scrapeErr                string
	scraped                  bool // a scrape succeeded before: a counter that appears now counts from 0
}

// counter turns successive readings of a Prometheus counter into a total
// since the first reading. A reading below the previous one means the
// engine restarted: the new value itself is the delta. The first reading
// is only a baseline on the engine's first scrape (warden start, possibly
// long after the engine's); a counter that first appears in a later scrape
// started at 0 in between, so its first reading counts in full.
type counter struct {
	last, total float64
	seen        bool
}

// observe folds in a reading; it reports whether the counter went down
// (the engine restarted without the warden being told).
func (c *counter) observe(v float64) (reset bool) {
	if !c.seen {
		c.last, c.seen = v, true
		return false
	}
	d := v - c.last
	if d < 0 {
		d, reset = v, true
	}
	c.total += d
	c.last = v
	return reset
}

// restarted makes the next reading count in full (the engine starts at 0).
func (c *counter) restarted() {
	if c.seen {
		c.last = 0
	}
}

// Sample is one parse of an engine's /metrics (Parse).
type Sample struct {
	running, waiting, kvUsed                         float64
	queries, hits, prompt, generated, preemptions    float64
	kvCapacity                                       int
	hasQueries, hasHits, hasPrompt, hasGen, hasPreem bool

	offload                             Offload
	timeScale                           float64 // metricname.SimTimeScale; 0 when absent
	hasRunning                          bool
	warden                              bool // read from another warden's mirrors (wardenSample)
	offQueries, offHits                 float64
	offLoaded, offStored                float64
	hasOffQ, hasOffH, hasOffL, hasOffSt bool

	// engines are the samples of each vLLM engine (the engine label: the
	// data-parallel ranks of a server run with --data-parallel-size; "0"
	// alone for one engine), nil when the exposition has no engine label.
	engines map[string]Sample
}

// FromWarden reports whether the sample was read from another warden's
// /metrics (a box's `warden serve` behind route or epp), not an engine's.
func (s Sample) FromWarden() bool { return s.warden }

// Engines are the engine label's values in the sample, in numeric order
// (a vLLM server's data-parallel ranks: "0", "1", ...).
func (s Sample) Engines() []string {
	ids := slices.Collect(maps.Keys(s.engines))
	slices.SortFunc(ids, func(a, b string) int {
		x, errA := strconv.Atoi(a)
		y, errB := strconv.Atoi(b)
		if errA == nil && errB == nil {
			return x - y
		}
		return strings.Compare(a, b)
	})
	return ids
}

// Engine is the sample of one engine (its series with engine=id, and the
// series without an engine label); ok is false when the server reported
// no such engine.
func (s Sample) Engine(id string) (Sample, bool) {
	e, ok := s.engines[id]
	return e, ok
}

// HasRunning reports whether the sample had vLLM's running-requests gauge
// (or is another warden's): a /metrics answer that lacks it did not carry
// what the warden reads.
func (s Sample) HasRunning() bool { return s.hasRunning }

// Offload is an engine's host-RAM KV tier (vLLM's KV offloading) as its
// vllm:cache_config_info says: the labels kv_offloading_backend ("native",
// "lmcache") and kv_offloading_size (GiB, "None" when off), vLLM 0.32.0
// config/cache.py (metrics_info exports every CacheConfig field as a
// label). Zero when the engine has no tier, or is too old to say.
type Offload struct {
	Backend string // "" none
	Bytes   uint64 // configured size, summed over the engines; 0 unknown (lmcache sizes its own server)
}

// Parse reads vLLM's Prometheus text, summing samples over labels
// (engines). It accepts counter names with and without _total and either
// KV usage gauge name.
func Parse(r io.Reader) (Sample, error) {
	fams, err := promtext.Parse(r)
	if err != nil {
		return Sample{}, err
	}
	if ws, ok := wardenSample(fams); ok && fams[mn.VLLMRunning] == nil {
		ws.warden = true
		return ws, nil // another warden (route in front of serve): dynamic.go
	}
	s := parseVLLM(fams)
	if parts := fams.Split(mn.EngineLabel); len(parts) > 0 {
		s.engines = make(map[string]Sample, len(parts))
		for id, part := range parts {
			s.engines[id] = parseVLLM(part)
		}
	}
	return s, nil
}

// parseVLLM reads vLLM's series, summed over their labels.
func parseVLLM(fams promtext.Families) Sample {
	var s Sample
	s.running, s.hasRunning = fams.Sum(mn.VLLMRunning)
	s.waiting, _ = fams.Sum(mn.VLLMWaiting)
	if v, ok := fams.Sum(mn.VLLMKVUsage); ok {
		s.kvUsed = v
	} else {
		s.kvUsed, _ = fams.Sum(mn.VLLMGPUKVUsage)
	}
	s.queries, s.hasQueries = fams.Counter(mn.VLLMPrefixQuery)
	s.hits, s.hasHits = fams.Counter(mn.VLLMPrefixHits)
	s.prompt, s.hasPrompt = fams.Counter(mn.VLLMPrompt)
	s.generated, s.hasGen = fams.Counter(mn.VLLMGeneration)
	s.preemptions, s.hasPreem = fams.Counter(mn.VLLMPreemptions)
	s.kvCapacity = kvCapacity(fams[mn.VLLMCacheConfig])
	s.offload = offloadConfig(fams[mn.VLLMCacheConfig])
	s.timeScale, _ = fams.Sum(mn.SimTimeScale)
	s.offQueries, s.hasOffQ = fams.Counter(mn.VLLMExternalQueries)
	s.offHits, s.hasOffH = fams.Counter(mn.VLLMExternalHits)
	s.offLoaded, s.hasOffL = fams.Counter(mn.VLLMOffloadLoadBytes)
	s.offStored, s.hasOffSt = fams.Counter(mn.VLLMOffloadStoreBytes)
	if !s.hasOffL && !s.hasOffSt {
		if by, ok := fams.CounterBy(mn.VLLMOffloadTotalBytes, "transfer_type"); ok {
			s.offLoaded, s.hasOffL = by["CPU_to_GPU"], true
			s.offStored, s.hasOffSt = by["GPU_to_CPU"], true
		}
	}
	if s.offload.Backend == "" && (s.hasOffL || s.hasOffSt) {
		// Only vLLM's native offloading connector exports these (an
		// engine whose cache_config_info lacks the tier's labels).
		s.offload.Backend = "native"
	}
	return s
}

// offloadConfig reads the host KV tier from vllm:cache_config_info's
// kv_offloading_backend and kv_offloading_size labels, summing the size
// over engines. The size counts for the native backend only: LMCache's
// capacity is its server's, which vLLM does not pass it.
func offloadConfig(f *dto.MetricFamily) Offload {
	var o Offload
	for _, m := range f.GetMetric() {
		backend, size := "", ""
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "kv_offloading_backend":
				backend = l.GetValue()
			case "kv_offloading_size":
				size = l.GetValue()
			}
		}
		gib, err := strconv.ParseFloat(size, 64)
		if err != nil || !(gib > 0) || gib > 1<<30 { // "None": no tier; NaN, Inf or absurd: ignored
			continue
		}
		if backend == "" {
			backend = "native" // vLLM's default backend
		}
		o.Backend = backend
		if backend == "native" {
			o.Bytes += uint64(gib * (1 << 30))
		}
	}
	return o
}

// kvCapacity is num_gpu_blocks x block_size from vllm:cache_config_info,
// summed over engines; 0 when unknown.
func kvCapacity(f *dto.MetricFamily) int {
	total := 0
	for _, m := range f.GetMetric() {
		var blocks, size int
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "num_gpu_blocks":
				blocks, _ = strconv.Atoi(l.GetValue())
			case "block_size":
				size, _ = strconv.Atoi(l.GetValue())
			}
		}
		total += blocks * size
	}
	return total
}

// Apply folds a sample taken at at into the state. It reports whether a
// counter went down: the engine restarted unannounced (a server the warden
// did not start, or one restarted behind its back), and with it its
// prefix cache was emptied.
func (e *Scraped) Apply(s Sample, at time.Time) (reset bool) {
	e.running, e.waiting, e.kvUsed = s.running, s.waiting, s.kvUsed
	if s.kvCapacity > 0 {
		e.kvCapacity = s.kvCapacity
	}
	if s.offload.Backend != "" {
		e.offload = s.offload
	}
	e.timeScale = s.timeScale
	for _, c := range []struct {
		c  *counter
		v  float64
		ok bool
	}{{&e.queries, s.queries, s.hasQueries}, {&e.hits, s.hits, s.hasHits}, {&e.prompt, s.prompt, s.hasPrompt},
		{&e.generated, s.generated, s.hasGen}, {&e.preemptions, s.preemptions, s.hasPreem},
		{&e.offQueries, s.offQueries, s.hasOffQ}, {&e.offHits, s.offHits, s.hasOffH},
		{&e.offLoaded, s.offLoaded, s.hasOffL}, {&e.offStored, s.offStored, s.hasOffSt}} {
		if !c.ok {
			continue
		}
		if !c.c.seen && e.scraped {
			c.c.seen = true // last 0: born since the previous scrape
		}
		if c.c.observe(c.v) {
			reset = true
		}
	}
	e.scrapedAt, e.scrapeErr, e.scraped = at, "", true
	return reset
}

// Fail records a failed scrape's error (the last values stay).
func (e *Scraped) Fail(err string) { e.scrapeErr = err }

// Restarted makes every counter's next reading count in full: the engine
// restarted and its counters start from 0 again.
func (e *Scraped) Restarted() {
	for _, c := range []*counter{&e.queries, &e.hits, &e.prompt, &e.generated, &e.preemptions,
		&e.offQueries, &e.offHits, &e.offLoaded, &e.offStored} {
		c.restarted()
	}
}

// Stats is what the panel and placement read of a Scraped.
type Stats struct {
	Running, Waiting, KVUsed                      float64
	KVCapacity                                    int     // tokens; 0 unknown
	Queries, Hits, Prompt, Generated, Preemptions float64 // deltas since warden start
	ScrapedAt                                     time.Time
	ScrapeErr                                     string

	// The host KV tier: its configuration, and as deltas since warden
	// start the tokens looked up in it (GPU misses) and found there, and
	// the bytes loaded from and stored to it.
	Offload                                Offload
	OffloadQueries, OffloadHits            float64
	OffloadLoadedBytes, OffloadStoredBytes float64
	// TimeScale is the engine's simulated seconds per wall second: the
	// simulator's --sim-time-scale; 0 for a real engine (real time).
	TimeScale float64
	// OffloadStoredNow is the engine's own count of bytes stored to the
	// tier since it (re)started, as last read (OffloadFilled).
	OffloadStoredNow float64
}

// OffloadFilled estimates how full the host tier is, 0..1: the bytes the
// engine stored to it since it started over its size. vLLM exports no
// occupancy nor eviction count; it stores each block once and evicts only
// when it needs room, so the estimate is exact until the tier is full, when
// it reads 1 (and stores from then on replace the least recently used). -1
// when not known (no tier, a size or a store counter not exported).
func (s Stats) OffloadFilled() float64 {
	if s.Offload.Bytes == 0 || s.OffloadStoredNow < 0 {
		return -1
	}
	return min(1, s.OffloadStoredNow/float64(s.Offload.Bytes))
}

// HostKVTokens is the host tier's size in tokens: its configured bytes over
// the bytes a token takes, measured as bytes loaded per token found there
// (the tier's hits); 0 without a tier, -1 for a tier whose size in tokens
// is not known yet (no hit yet, or a backend that sizes itself).
func (s Stats) HostKVTokens() int {
	switch {
	case s.Offload.Backend == "":
		return 0
	case s.Offload.Bytes == 0 || s.OffloadHits <= 0 || s.OffloadLoadedBytes <= 0:
		return -1
	}
	return int(float64(s.Offload.Bytes) / (s.OffloadLoadedBytes / s.OffloadHits))
}

// Stats copies the current values.
func (e *Scraped) Stats() Stats {
	return Stats{Running: e.running, Waiting: e.waiting, KVUsed: e.kvUsed, KVCapacity: e.kvCapacity,
		Queries: e.queries.total, Hits: e.hits.total, Prompt: e.prompt.total, Generated: e.generated.total,
		Preemptions: e.preemptions.total, ScrapedAt: e.scrapedAt, ScrapeErr: e.scrapeErr,
		Offload: e.offload, OffloadQueries: e.offQueries.total, OffloadHits: e.offHits.total,
		OffloadLoadedBytes: e.offLoaded.total, OffloadStoredBytes: e.offStored.total,
		OffloadStoredNow: e.offStoredNow(), TimeScale: e.timeScale}
}

// offStoredNow is the engine's store counter as last read, -1 when it does
// not export one.
func (e *Scraped) offStoredNow() float64 {
	if !e.offStored.seen {
		return -1
	}
	return e.offStored.last
}

// wardenSample reads the /metrics of a warden used as a replica (a `warden
// serve` on another host behind `warden route`): its replicas' engine
// figures summed, KV use weighted by each engine's capacity. ok is false
// when the text is not a warden's.
func wardenSample(fams promtext.Families) (s Sample, ok bool) {
	if fams[mn.EngineRunning] == nil {
		return s, false
	}
	s.running, s.hasRunning = fams.Sum(mn.EngineRunning)
	s.waiting, _ = fams.Sum(mn.EngineWaiting)
	s.queries, s.hasQueries = fams.Sum(mn.EnginePrefixQuery)
	s.hits, s.hasHits = fams.Sum(mn.EnginePrefixHits)
	s.prompt, s.hasPrompt = fams.Sum(mn.EnginePromptTokens)
	s.generated, s.hasGen = fams.Sum(mn.EngineGenTokens)
	s.preemptions, s.hasPreem = fams.Sum(mn.EnginePreemptions)
	capOf, _ := fams.SumBy(mn.EngineKVCapacity, "replica")
	usage, _ := fams.SumBy(mn.EngineKVUsage, "replica")
	var used, capacity float64
	for rep, ratio := range usage {
		used += ratio * capOf[rep]
		capacity += capOf[rep]
	}
	if capacity > 0 {
		s.kvUsed, s.kvCapacity = used/capacity, int(capacity)
	}
	return s, true
}

// VLLMMaxNumSeqs is vLLM's default max_num_seqs of an API server on most
// GPUs (and without one): 1024 only where every GPU has at least 70 GiB and
// none is an A100 (engineplan.DefaultMaxNumSeqs). The router assumes it
// for a replica that says nothing of its limit.
const VLLMMaxNumSeqs = 256
