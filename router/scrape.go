package router

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/metricname"
	"github.com/lmwarden/warden/router/place"
)

// check polls one replica's /health and /metrics and records the outcome.
func (c *Core) check(ctx context.Context, r *Replica) {
	err := c.getOK(ctx, r.target.String()+"/health", nil)
	if err == nil {
		var s engine.Sample
		s, err = c.scrape(ctx, r)
		if err == nil {
			r.mu.Lock()
			reset := r.eng.Apply(s, c.clock())
			scale := r.eng.Stats().TimeScale
			r.mu.Unlock()
			c.noteTimeScale(scale)
			if reset {
				c.cacheWiped(r.rank, "its counters went down: the engine restarted")
			}
			c.learnLimits(ctx, r) // a probed replica's max_num_seqs, before it enters rotation
			if r.maxModelLen.Load() == 0 {
				c.learnMaxModelLen(ctx, r)
			}
		}
	}
	if err != nil {
		r.mu.Lock()
		r.eng.Fail(err.Error())
		r.mu.Unlock()
	}
	r.health.Check(err == nil, err, c.clock())
}

// noteTimeScale tells placement the engines' time scale when an engine
// reports one that differs from what it was told (a simulator's
// --sim-time-scale: agents on its clock come back that much sooner).
func (c *Core) noteTimeScale(scale float64) {
	if scale <= 0 {
		scale = 1
	}
	if math.Float64frombits(c.timeScale.Swap(math.Float64bits(scale))) == scale {
		return
	}
	c.placer.Sessions(func(t *place.Table) { t.SetTimeScale(scale) })
	if scale != 1 {
		c.log.Info("the engines run on a simulated clock: the active window follows it", "time_scale", scale)
	}
}

// EngineTimeScale is the engines' simulated seconds per wall second as
// they last said it (1: real time, or not said).
func (c *Core) EngineTimeScale() float64 {
	if s := math.Float64frombits(c.timeScale.Load()); s > 0 {
		return s
	}
	return 1
}

// metricsQuery asks an engine's /metrics for the series the warden reads
// only (metricname.Scraped). vLLM 0.32 serves GET /metrics through
// prometheus-fastapi-instrumentator, which sends every series (62 KB on the
// CPU build, idle); the prometheus_client app it mounts beside it answers
// /metrics/ and honours name[] (3.4 KB). Servers without /metrics/ (the
// simulator, another warden) are read whole.
var metricsQuery = func() string {
	q := url.Values{"name[]": metricname.Scraped}
	return "/metrics/?" + q.Encode()
}()

// scrape reads the replica's /metrics: the filtered series, unless the
// server answered the filtered request with an error or without vLLM's
// running-requests gauge while its whole /metrics has it (then, and from
// then on, the whole).
func (c *Core) scrape(ctx context.Context, r *Replica) (engine.Sample, error) {
	var s engine.Sample
	read := func(path string) error {
		return c.getOK(ctx, r.target.String()+path, func(body io.Reader) error {
			var perr error
			s, perr = engine.Parse(io.LimitReader(body, engine.MaxMetricsBytes))
			return perr
		})
	}
	whole := r.fullScrape.Load()
	if !whole {
		if err := read(metricsQuery); err == nil && s.HasRunning() {
			return s, nil
		}
	}
	err := read("/metrics")
	if err == nil && !whole && s.HasRunning() {
		r.fullScrape.Store(true)
		r.log.Info("the engine does not answer /metrics/?name[]= as vLLM does: reading its whole /metrics from now on")
	}
	return s, err
}

// learnMaxModelLen reads the context the engine serves at (vLLM's
// max_model_len in its /v1/models entry): ranks on cards of different sizes,
// or with --max-model-len auto, can fit different ones, and the warden
// reports the smallest (Status.MaxModelLen, /v1/models).
func (c *Core) learnMaxModelLen(ctx context.Context, r *Replica) {
	_ = c.getOK(ctx, r.target.String()+"/v1/models", func(body io.Reader) error {
		b, err := io.ReadAll(io.LimitReader(body, maxModelsBody))
		if err != nil {
			return err
		}
		var n int64
		for _, m := range gjson.GetBytes(b, "data").Array() {
			if v := m.Get("max_model_len").Int(); v > 0 && (n == 0 || v < n) {
				n = v
			}
		}
		if n > 0 && r.maxModelLen.Swap(n) != n {
			r.log.Info("context learned from the engine", "max_model_len", n)
		}
		return nil
	})
}

// getOK GETs url and requires 200; read, if set, consumes the body.
func (c *Core) getOK(ctx context.Context, url string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
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
func (c *Core) CheckNow(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range c.Replicas() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.check(ctx, r)
		}()
	}
	wg.Wait()
}

// Run polls the replicas every Config.ScrapeInterval (once at once), expires
// idle sessions and keeps the overcommit peak, until ctx is done.
func (c *Core) Run(ctx context.Context) {
	go c.placer.TickBalancers(ctx, c.cfg.BalancerInterval)
	t := time.NewTicker(c.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		c.CheckNow(ctx)
		c.housekeep()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
