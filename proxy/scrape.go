package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/promtext"
)

// maxMetricsBytes bounds one /metrics response.
const maxMetricsBytes = 8 << 20

// engineState is what the latest scrape of an engine's /metrics said.
// Counters are kept as deltas since the first scrape (warden start), with
// counter resets (engine restarts) handled.
type engineState struct {
	running, waiting, kvUsed float64
	kvCapacity               int
	queries, hits            counter
	prompt, generated        counter
	preemptions              counter
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

func (c *counter) observe(v float64) {
	if !c.seen {
		c.last, c.seen = v, true
		return
	}
	d := v - c.last
	if d < 0 {
		d = v
	}
	c.total += d
	c.last = v
}

// restarted makes the next reading count in full (the engine starts at 0).
func (c *counter) restarted() {
	if c.seen {
		c.last = 0
	}
}

// engineSample is one parse of an engine's /metrics.
type engineSample struct {
	running, waiting, kvUsed                         float64
	queries, hits, prompt, generated, preemptions    float64
	kvCapacity                                       int
	hasQueries, hasHits, hasPrompt, hasGen, hasPreem bool
}

// parseMetrics reads vLLM's Prometheus text, summing samples over labels
// (engines). It accepts counter names with and without _total and either
// KV usage gauge name.
func parseMetrics(r io.Reader) (engineSample, error) {
	fams, err := promtext.Parse(r)
	if err != nil {
		return engineSample{}, err
	}
	if ws, ok := wardenSample(fams); ok && fams["vllm:num_requests_running"] == nil {
		return ws, nil // another warden (route in front of serve): dynamic.go
	}
	var s engineSample
	s.running, _ = fams.Sum("vllm:num_requests_running")
	s.waiting, _ = fams.Sum("vllm:num_requests_waiting")
	if v, ok := fams.Sum("vllm:kv_cache_usage_perc"); ok {
		s.kvUsed = v
	} else {
		s.kvUsed, _ = fams.Sum("vllm:gpu_cache_usage_perc")
	}
	s.queries, s.hasQueries = fams.Counter("vllm:prefix_cache_queries")
	s.hits, s.hasHits = fams.Counter("vllm:prefix_cache_hits")
	s.prompt, s.hasPrompt = fams.Counter("vllm:prompt_tokens")
	s.generated, s.hasGen = fams.Counter("vllm:generation_tokens")
	s.preemptions, s.hasPreem = fams.Counter("vllm:num_preemptions")
	s.kvCapacity = kvCapacity(fams["vllm:cache_config_info"])
	return s, nil
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

// apply folds a sample into the replica's engine state. Caller holds r.mu.
func (e *engineState) apply(s engineSample, at time.Time) {
	e.running, e.waiting, e.kvUsed = s.running, s.waiting, s.kvUsed
	if s.kvCapacity > 0 {
		e.kvCapacity = s.kvCapacity
	}
	for _, c := range []struct {
		c  *counter
		v  float64
		ok bool
	}{{&e.queries, s.queries, s.hasQueries}, {&e.hits, s.hits, s.hasHits}, {&e.prompt, s.prompt, s.hasPrompt},
		{&e.generated, s.generated, s.hasGen}, {&e.preemptions, s.preemptions, s.hasPreem}} {
		if !c.ok {
			continue
		}
		if !c.c.seen && e.scraped {
			c.c.seen = true // last 0: born since the previous scrape
		}
		c.c.observe(c.v)
	}
	e.scrapedAt, e.scrapeErr, e.scraped = at, "", true
}

// check polls one replica's /health and /metrics and records the outcome.
func (p *Proxy) check(ctx context.Context, r *replica) {
	err := p.getOK(ctx, r.target.String()+"/health", nil)
	if err == nil {
		var s engineSample
		err = p.getOK(ctx, r.target.String()+"/metrics", func(body io.Reader) error {
			var perr error
			s, perr = parseMetrics(io.LimitReader(body, maxMetricsBytes))
			return perr
		})
		if err == nil {
			r.mu.Lock()
			r.eng.apply(s, p.clock())
			r.mu.Unlock()
			p.learnLimits(ctx, r) // a probed replica's max_num_seqs, before it enters rotation
		}
	}
	if err != nil {
		r.mu.Lock()
		r.eng.scrapeErr = err.Error()
		r.mu.Unlock()
	}
	r.noteHealth(err == nil, err)
}

// getOK GETs url and requires 200; read, if set, consumes the body.
func (p *Proxy) getOK(ctx context.Context, url string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if read != nil {
		return read(resp.Body)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return nil
}

// CheckNow polls every replica's /health and /metrics once, concurrently,
// and returns when all are done.
func (p *Proxy) CheckNow(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range p.replicaList() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.check(ctx, r)
		}()
	}
	wg.Wait()
}

// Run polls the replicas every Config.ScrapeInterval (once at once), expires
// idle sessions and keeps the overcommit peak, until ctx is done.
func (p *Proxy) Run(ctx context.Context) {
	go p.tickBalancers(ctx)
	t := time.NewTicker(p.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		p.CheckNow(ctx)
		p.housekeep()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
