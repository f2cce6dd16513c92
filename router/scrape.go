package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/metricname"
	"github.com/lmwarden/warden/router/place"
)

// checkServer polls one server's /health and /metrics and records the
// outcome on each replica it serves: the one replica of a plain server, or
// each engine of a vLLM data-parallel server (one scrape read per engine).
// A replica that is to learn its server's engines (Backend.LearnDP) and
// finds several becomes one pinned replica per engine first.
func (c *Core) checkServer(ctx context.Context, reps []*Replica) {
	lead := reps[0]
	err := c.getOK(ctx, lead.target.String()+"/health", nil)
	var s engine.Sample
	if err == nil {
		s, err = c.scrape(ctx, lead)
	}
	if err == nil && lead.learnDP.Load() {
		if ids := s.Engines(); len(ids) > 1 {
			reps = c.expandDP(lead, ids)
		} else {
			// One engine (vLLM reports every engine's counters from its
			// start): a plain server, scraped filtered from now on.
			lead.learnDP.Store(false)
		}
	}
	for _, r := range reps {
		c.record(ctx, r, s, err)
	}
}

// record folds one check of a replica's server into the replica: its
// engine's part of the sample when it is pinned to one, else the whole.
func (c *Core) record(ctx context.Context, r *Replica, s engine.Sample, err error) {
	if err == nil && r.spec.DPPinned {
		id := strconv.Itoa(r.spec.DPRank)
		if e, ok := s.Engine(id); ok {
			s = e
		} else {
			err = fmt.Errorf("the server's /metrics has no engine %s (it reports %q): is it started with "+
				"--data-parallel-size %d or more?", id, s.Engines(), r.spec.DPRank+1)
		}
	}
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
	if err != nil {
		r.mu.Lock()
		r.eng.Fail(err.Error())
		r.mu.Unlock()
	}
	r.health.Check(err == nil, err, c.clock())
}

// servers groups replicas by the server they are on (their URL), in rank
// order: the engines of one data-parallel server share one check.
func servers(list []*Replica) [][]*Replica {
	var out [][]*Replica
	at := map[string]int{}
	for _, r := range list {
		i, ok := at[r.spec.URL]
		if !ok {
			i = len(out)
			at[r.spec.URL] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
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
// /metrics/ and honours name[] (3.4 KB), as the simulator does. Servers
// without /metrics/ (another warden), and vLLM under --data-parallel-size
// (which answers it empty), are read whole.
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
	// vLLM under --data-parallel-size answers /metrics/?name[]= empty (its
	// multiprocess collector cannot be filtered; 0.32, measured): a server
	// that may have several engines is read whole, without trying.
	whole := r.fullScrape.Load() || r.spec.DPPinned || r.learnDP.Load()
	if !whole {
		if err := read(metricsQuery); err == nil && s.HasRunning() {
			return s, nil
		}
	}
	err := read("/metrics")
	if err == nil && !whole && s.HasRunning() {
		r.fullScrape.Store(true)
		if s.FromWarden() {
			r.log.Info("the server is a warden (a box's warden serve), which serves its /metrics whole: reading it whole from now on")
		} else {
			r.log.Info("the engine does not answer /metrics/?name[]= as vLLM does: reading its whole /metrics from now on")
		}
	}
	return s, err
}

// learnMaxModelLen reads the context the engine serves at (vLLM's
// max_model_len in its /v1/models entry): ranks on cards of different sizes,
// or with --max-model-len auto, can fit different ones, and the warden
// reports the smallest (Status.MaxModelLen, /v1/models).
func (c *Core) learnMaxModelLen(ctx context.Context, r *Replica) {
	err := c.getOK(ctx, r.target.String()+"/v1/models", func(body io.Reader) error {
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
	if err != nil && deniedErr(err) && !r.modelsDenied.Swap(true) {
		r.log.Warn("the server refuses GET /v1/models without a key (vLLM started with --api-key): its context is not "+
			"learned and clients are not told it; requests still pass with the key their clients send", "error", err)
	}
}

// deniedErr reports whether a getOK error is a 401 or 403 answer.
func deniedErr(err error) bool {
	var se *statusError
	return errors.As(err, &se) && (se.code == http.StatusUnauthorized || se.code == http.StatusForbidden)
}

// statusError is getOK's error for an answer other than 200.
type statusError struct {
	url, status string
	code        int
}

func (e *statusError) Error() string { return "GET " + e.url + ": " + e.status }

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
		return &statusError{url: url, status: resp.Status, code: resp.StatusCode}
	}
	if read != nil {
		return read(resp.Body)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return nil
}

// CheckNow polls every server's /health and /metrics once, concurrently,
// and returns when all are done.
func (c *Core) CheckNow(ctx context.Context) {
	var wg sync.WaitGroup
	for _, reps := range servers(c.Replicas()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.checkServer(ctx, reps)
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
		c.syncFeeds(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
