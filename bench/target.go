package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/promtext"
	"github.com/lmwarden/warden/router/schema"
)

// Target is the server under load: a warden (it serves /warden/status) or a
// bare engine (vLLM or the simulator, read through its own /metrics).
type Target struct {
	URL    string // base URL without a trailing slash
	Warden bool   // true when /warden/status answers
	// AdminToken, when set, is sent as a bearer token on the warden's admin
	// endpoints (needed when the bench is not on the warden's loopback).
	AdminToken string
	// Engines, when set, are the engines' base URLs: Sample and ResetCache
	// go to each of them instead of the target (a gateway in front of
	// them answers /metrics from one engine at random).
	Engines []string
	hc      *http.Client
}

// ErrNotWarden is returned by warden-only operations against a bare engine.
var ErrNotWarden = errors.New("target is not a warden (GET /warden/status answered 404)")

// Probe finds out what kind of server base is.
func Probe(ctx context.Context, hc *http.Client, base string) (*Target, error) {
	t := &Target{URL: strings.TrimRight(base, "/"), hc: hc}
	body, code, err := t.get(ctx, "/warden/status")
	switch {
	case err != nil:
		return nil, fmt.Errorf("probing %s: %w", t.URL, err)
	case code == http.StatusOK && gjson.ValidBytes(body):
		t.Warden = true
	case code == http.StatusNotFound:
		if _, code, err = t.get(ctx, "/metrics"); err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("probing %s: neither /warden/status nor /metrics answers (metrics: HTTP %d, %v)", t.URL, code, err)
		}
	default:
		return nil, fmt.Errorf("probing %s: GET /warden/status answered HTTP %d", t.URL, code)
	}
	return t, nil
}

func (t *Target) get(ctx context.Context, path string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL+path, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return b, resp.StatusCode, err
}

func (t *Target) post(ctx context.Context, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+t.AdminToken)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit)) // to EOF: the connection stays reusable
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Model returns the first model id of GET /v1/models.
func (t *Target) Model(ctx context.Context) (string, error) {
	body, code, err := t.get(ctx, "/v1/models")
	if err != nil {
		return "", err
	}
	id := gjson.GetBytes(body, "data.0.id").String()
	if code != http.StatusOK || id == "" {
		return "", fmt.Errorf("GET /v1/models: HTTP %d, no model id (pass --model)", code)
	}
	return id, nil
}

// CountTokens asks the target's tokenizer how many prompt tokens one user
// message of text makes (POST /v1/messages/count_tokens, which vLLM, the
// simulator and the warden serve).
func (t *Target) CountTokens(ctx context.Context, model, text string) (int, error) {
	body := mustJSON(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": text}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+"/v1/messages/count_tokens", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	n := gjson.GetBytes(b, "input_tokens")
	if resp.StatusCode != http.StatusOK || !n.Exists() {
		return 0, fmt.Errorf("POST /v1/messages/count_tokens: HTTP %d: %.200s", resp.StatusCode, b)
	}
	return int(n.Int()), nil
}

// Policy returns the warden's current routing policy.
func (t *Target) Policy(ctx context.Context) (string, error) {
	if !t.Warden {
		return "", ErrNotWarden
	}
	st, err := t.status(ctx)
	if err != nil {
		return "", err
	}
	return st.Policy, nil
}

// SetPolicy switches the warden's routing policy (POST /warden/policy).
func (t *Target) SetPolicy(ctx context.Context, name string) error {
	if !t.Warden {
		return ErrNotWarden
	}
	return t.post(ctx, "/warden/policy", mustJSON(map[string]string{"policy": name}))
}

// ResetCache empties the engines' prefix caches: POST /warden/reset_prefix_cache
// on a warden, vLLM's dev-mode POST /reset_prefix_cache on an engine.
func (t *Target) ResetCache(ctx context.Context) error {
	if len(t.Engines) > 0 {
		for _, e := range t.Engines {
			et := &Target{URL: e, AdminToken: t.AdminToken, hc: t.hc}
			if err := et.post(ctx, "/reset_prefix_cache", nil); err != nil {
				return fmt.Errorf("engine %s: %w", e, err)
			}
		}
		return nil
	}
	if t.Warden {
		return t.post(ctx, "/warden/reset_prefix_cache", nil)
	}
	return t.post(ctx, "/reset_prefix_cache", nil)
}

// replicaSample is one replica's (or engine's) counters at one instant.
type replicaSample struct {
	Running, Waiting float64 // engine gauges
	Hits, Queries    float64 // prefix-cache counters, tokens
	HostHits         float64 // tokens found in a host KV tier (vLLM's external prefix-cache hits)
	CounterKnownSet  bool
	Preemptions      float64 // engine counter
	PreemptKnown     bool
}

// sample maps replica name (warden rank, or vLLM's engine label) to counters.
type sample map[string]replicaSample

// Sample reads every replica's running gauge and prefix counters: from
// each of Engines when set, else from the target.
func (t *Target) Sample(ctx context.Context) (sample, error) {
	if len(t.Engines) > 0 {
		return t.engineSample(ctx)
	}
	if t.Warden {
		st, err := t.status(ctx)
		if err != nil {
			return nil, err
		}
		return wardenSample(st), nil
	}
	body, code, err := t.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: HTTP %d", code)
	}
	return parseEngineMetrics(body)
}

// engineSample reads every engine of Engines at once and keys its
// replicas "I" (or "I/ENGINE" for vLLM's internal data-parallel engines),
// I the engine's index in Engines; one engine not answering fails the
// sample, as the target would.
func (t *Target) engineSample(ctx context.Context) (sample, error) {
	pages := make([]sample, len(t.Engines))
	errs := make([]error, len(t.Engines))
	var wg sync.WaitGroup
	for i, e := range t.Engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, code, err := (&Target{URL: e, hc: t.hc}).get(ctx, "/metrics")
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("engine %s: %w", e, err)
			case code != http.StatusOK:
				errs[i] = fmt.Errorf("engine %s: GET /metrics: HTTP %d", e, code)
			default:
				pages[i], errs[i] = parseEngineMetrics(body)
				if errs[i] != nil {
					errs[i] = fmt.Errorf("engine %s: %w", e, errs[i])
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := sample{}
	for i, page := range pages {
		for k, r := range page {
			key := strconv.Itoa(i)
			if len(page) > 1 {
				key += "/" + k
			}
			s[key] = r
		}
	}
	return s, nil
}

// status reads the warden's status with the panel's own client, so the
// bench and `warden status` read one schema one way.
func (t *Target) status(ctx context.Context) (schema.Status, error) {
	st, _, err := schema.Fetch(ctx, t.hc, t.URL)
	return st, err
}

// wardenSample maps the replicas of the warden's status to samples.
func wardenSample(st schema.Status) sample {
	s := sample{}
	for _, r := range st.Replicas {
		s[strconv.Itoa(r.Rank)] = replicaSample{Running: r.Running, Waiting: r.Waiting,
			Hits: r.PrefixHits, Queries: r.PrefixQueries, HostHits: r.OffloadHits, CounterKnownSet: true,
			Preemptions: r.Preemptions, PreemptKnown: true}
	}
	return s
}

// The fields that tell a target's clock: the warden's status field and the
// simulator's own gauge (sim.MetricTimeScale).
const (
	statusTimeScale = "engine_time_scale"
	metricTimeScale = "warden_sim_time_scale"
)

// TimeScale is what the target says of its engines' clock: simulated
// seconds per wall second, and where it said so. A warden says it in its
// status (engine_time_scale; 0 means 1); a warden that does not is asked
// through its first engine's /metrics, and a bare simulator through its own,
// for the gauge warden_sim_time_scale. source is "" when nothing said it (vLLM
// exports no such gauge): then the scale is unknown, not 1.
func (t *Target) TimeScale(ctx context.Context) (scale float64, source string) {
	if !t.Warden {
		return engineTimeScale(ctx, t.hc, t.URL)
	}
	body, code, err := t.get(ctx, "/warden/status")
	if err != nil || code != http.StatusOK {
		return 0, ""
	}
	if v := gjson.GetBytes(body, statusTimeScale); v.Exists() {
		scale = v.Float()
		if scale <= 0 {
			scale = 1
		}
		return scale, "the warden's /warden/status " + statusTimeScale
	}
	for _, u := range gjson.GetBytes(body, "replicas.#.url").Array() {
		if u.String() != "" { // the first engine speaks for all: they share their arguments
			return engineTimeScale(ctx, t.hc, strings.TrimRight(u.String(), "/"))
		}
	}
	return 0, ""
}

// engineTimeScale reads the simulator's time-scale gauge from base/metrics
// (a few seconds at most: an engine may be out of the bench's reach).
func engineTimeScale(ctx context.Context, hc *http.Client, base string) (float64, string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	body, code, err := (&Target{URL: base, hc: hc}).get(ctx, "/metrics")
	if err != nil || code != http.StatusOK {
		return 0, ""
	}
	fams, err := promtext.Parse(bytes.NewReader(body))
	if err != nil {
		return 0, ""
	}
	if v, ok := fams.Sum(metricTimeScale); ok && v > 0 {
		return v, metricTimeScale + " at " + base + "/metrics"
	}
	return 0, ""
}

// Engine metric names; the prefix counters are accepted with or without _total.
const (
	metricRunning = "vllm:num_requests_running"
	metricWaiting = "vllm:num_requests_waiting"
	metricQueries = "vllm:prefix_cache_queries"
	metricHits    = "vllm:prefix_cache_hits"
	metricHostHit = "vllm:external_prefix_cache_hits"
	metricPreempt = "vllm:num_preemptions"
)

// parseEngineMetrics reads a vLLM-style Prometheus text page. Series are
// grouped by their "engine" label (vLLM's internal data-parallel engines);
// a page without that label is one replica.
func parseEngineMetrics(body []byte) (sample, error) {
	fams, err := promtext.Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	s := sample{}
	add := func(byEngine map[string]float64, set func(*replicaSample, float64)) {
		for key, v := range byEngine {
			if key == "" {
				key = "0"
			}
			r := s[key]
			set(&r, v)
			s[key] = r
		}
	}
	gauge := func(name string) map[string]float64 { m, _ := fams.SumBy(name, "engine"); return m }
	counter := func(base string) map[string]float64 { m, _ := fams.CounterBy(base, "engine"); return m }
	add(gauge(metricRunning), func(r *replicaSample, v float64) { r.Running += v })
	add(gauge(metricWaiting), func(r *replicaSample, v float64) { r.Waiting += v })
	add(counter(metricPreempt), func(r *replicaSample, v float64) { r.Preemptions += v; r.PreemptKnown = true })
	add(counter(metricQueries), func(r *replicaSample, v float64) { r.Queries += v; r.CounterKnownSet = true })
	add(counter(metricHits), func(r *replicaSample, v float64) { r.Hits += v })
	add(counter(metricHostHit), func(r *replicaSample, v float64) { r.HostHits += v })
	return s, nil
}

// busy counts replicas with at least one running request.
func (s sample) busy() int {
	n := 0
	for _, r := range s {
		if r.Running >= 1 {
			n++
		}
	}
	return n
}

// prefixDelta sums the prefix counters' growth from before to after. A
// replica whose counters went down (engine restart) counts from zero; a
// replica absent before counts from zero too. ok is false when no replica
// reports the counters.
func prefixDelta(before, after sample) (hits, queries, hostHits float64, ok bool) {
	for k, a := range after {
		if !a.CounterKnownSet {
			continue
		}
		ok = true
		b := before[k]
		dh, dq, dx := a.Hits-b.Hits, a.Queries-b.Queries, a.HostHits-b.HostHits
		if dh < 0 || dq < 0 || dx < 0 {
			dh, dq, dx = a.Hits, a.Queries, a.HostHits
		}
		hits += dh
		queries += dq
		hostHits += dx
	}
	return hits, queries, hostHits, ok
}

// preemptDelta sums the preemption counters' growth from before to after,
// with prefixDelta's rules for restarts and new replicas; ok is false when
// no replica reports the counter.
func preemptDelta(before, after sample) (n float64, ok bool) {
	for k, a := range after {
		if !a.PreemptKnown {
			continue
		}
		ok = true
		d := a.Preemptions - before[k].Preemptions
		if d < 0 {
			d = a.Preemptions
		}
		n += d
	}
	return n, ok
}

// pollStat is one poll of the target: replicas with a running request, and
// running and waiting requests summed over the replicas.
type pollStat struct {
	Busy             int
	Running, Waiting float64
}

func (s sample) stat() pollStat {
	p := pollStat{Busy: s.busy()}
	for _, r := range s {
		p.Running += r.Running
		p.Waiting += r.Waiting
	}
	return p
}
