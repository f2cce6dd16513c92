package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/wardenproc"
)

// connCounter is a transport that counts, per request to host, whether it
// got a new connection or reused an idle one (httptrace's GotConn).
type connCounter struct {
	next             http.RoundTripper
	host             string
	fresh, reused    atomic.Int64
	turns, turnFresh atomic.Int64 // the same for the turns alone
}

func (c *connCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != c.host { // an engine's /metrics, asked for its time scale
		return c.next.RoundTrip(req)
	}
	turn := req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/v1/") && !strings.HasSuffix(req.URL.Path, "count_tokens")
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			c.reused.Add(1)
		} else {
			c.fresh.Add(1)
		}
		if turn {
			c.turns.Add(1)
			c.turnFresh.Add(int64(btoi(!i.Reused)))
		}
	}}
	return c.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
}

// startServe runs `warden serve --engine sim` (two ranks, the engines at
// --sim-time-scale scale) as a real subprocess and waits for its health.
func startServe(t *testing.T, scale string) string {
	t.Helper()
	port := strconv.Itoa(simproc.FreePort(t))
	dir := t.TempDir()
	p, err := wardenproc.Start(simproc.Binary(t), []string{"serve", "--model", "demo", "--engine", "sim", "--dp", "2",
		"--host", "127.0.0.1", "--port", port, "--log-dir", dir, "--stop-grace", "5s", "--",
		"--sim-time-scale", scale}, filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	url := "http://127.0.0.1:" + port
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := wardenproc.Poll(ctx, &http.Client{Timeout: 2 * time.Second}, url, 100*time.Millisecond, p.Done()); err != nil {
		t.Fatalf("warden serve not healthy: %v\n%s", err, p.Tail(40))
	}
	return url
}

// Against a real `warden serve --engine sim` at --sim-time-scale 20, a bench
// given no --time-scale reads the target's (the warden's status, or its
// engines' gauge) and keeps its connections alive as an agent's client
// does: every turn after a session's first reuses a connection, so the
// whole run dials about as many connections as it has requests in flight at
// once (sessions and a poll), not one per turn.
func TestKeepsConnectionsAndLearnsTimeScaleFromWarden(t *testing.T) {
	if testing.Short() {
		t.Skip("starts warden serve with simulator processes")
	}
	url := startServe(t, "20")
	for _, api := range []API{APIOpenAI, APIAnthropic} {
		t.Run(string(api), func(t *testing.T) {
			cfg := simConfig(url, api)
			cfg.TimeScale = 1 // not given: learned
			cfg.Turns = 4
			cfg.Stage = 40 * time.Second
			counter := &connCounter{next: newHTTPClient(8).Transport, host: strings.TrimPrefix(url, "http://")}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := (&Runner{Cfg: cfg, Log: quietLog(), HC: &http.Client{Transport: counter}}).Run(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if src := res.Config.TimeScaleSource; res.Config.TimeScale != 20 ||
				!strings.Contains(src, statusTimeScale) && !strings.Contains(src, metricTimeScale) {
				t.Errorf("time scale %v from %q, want 20 from the target", res.Config.TimeScale, res.Config.TimeScaleSource)
			}
			s := res.Stages[0]
			turns, fresh := counter.turns.Load(), counter.turnFresh.Load()
			t.Logf("%d turns (%d in the stage, %d errors): %d on new connections; all requests: %d new, %d reused",
				turns, s.Turns, s.Errors, fresh, counter.fresh.Load(), counter.reused.Load())
			if s.Errors != 0 || turns < 4*int64(cfg.Stages[0]) {
				t.Fatalf("%d turns, %d errors: want at least 4 turns a session and no error", turns, s.Errors)
			}
			if s.BenchLagP50 == nil || s.BenchLagP99 == nil || s.BenchLagMax == nil ||
				*s.BenchLagP50 > *s.BenchLagP99 || *s.BenchLagP99 > *s.BenchLagMax {
				t.Errorf("bench lag p50 %v p99 %v max %v: want all measured, in order", s.BenchLagP50, s.BenchLagP99, s.BenchLagMax)
			}
			// At most one connection per request in flight at once: the
			// sessions, and a status poll beside them.
			if limit := int64(cfg.Stages[0] + 1); counter.fresh.Load() > limit {
				t.Errorf("%d new connections for %d requests, want at most %d (sessions + a poll): the bench does not reuse its connections",
					counter.fresh.Load(), counter.fresh.Load()+counter.reused.Load(), limit)
			}
		})
	}
}

// A bare simulator says its time scale through its gauge; a --time-scale
// that contradicts it is refused with both values and the fix.
func TestTimeScaleFromSimulatorAndMismatchRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a simulator process")
	}
	p := simproc.Start(t, "--sim-time-scale", "20")
	hc := newHTTPClient(4)
	ctx := context.Background()
	tg, err := Probe(ctx, hc, p.URL)
	if err != nil {
		t.Fatal(err)
	}
	if scale, source := tg.TimeScale(ctx); scale != 20 || !strings.Contains(source, metricTimeScale) {
		t.Errorf("learned %v from %q, want 20 from %s", scale, source, metricTimeScale)
	}
	for _, c := range []struct {
		scale float64
		set   bool
		want  float64 // 0: refused
	}{{1, false, 20}, {20, true, 20}, {5, true, 0}} {
		cfg := simConfig(p.URL, APIOpenAI)
		cfg.TimeScale, cfg.TimeScaleSet = c.scale, c.set
		err := (&Runner{Cfg: cfg, Log: quietLog(), HC: hc}).learnTimeScale(ctx, tg, &cfg)
		var ee *exit.Error
		switch {
		case c.want == 0 && (err == nil || !errors.As(err, &ee) || ee.Code != 2 ||
			!strings.Contains(err.Error(), "--time-scale 5 ") || !strings.Contains(err.Error(), "time scale 20")):
			t.Errorf("--time-scale 5 against a sim at 20: err %v, want exit 2 naming both", err)
		case c.want != 0 && (err != nil || cfg.TimeScale != c.want):
			t.Errorf("--time-scale %v (given: %v): scale %v, err %v; want %v", c.scale, c.set, cfg.TimeScale, err, c.want)
		}
	}
}

// A warden that says its engines' time scale in its status is believed
// (0 means 1); one that does not, with no engine that says it either,
// leaves the scale unknown rather than 1.
func TestTimeScaleFromWardenStatus(t *testing.T) {
	for _, c := range []struct {
		status string
		want   float64
		known  bool
	}{
		{`{"policy":"sticky","engine_time_scale":10,"replicas":[]}`, 10, true},
		{`{"policy":"sticky","engine_time_scale":0,"replicas":[]}`, 1, true},
		{`{"policy":"sticky","replicas":[{"rank":0,"url":""}]}`, 0, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/warden/status" {
				http.NotFound(w, r)
				return
			}
			io.WriteString(w, c.status)
		}))
		tg, err := Probe(context.Background(), srv.Client(), srv.URL)
		if err != nil || !tg.Warden {
			t.Fatalf("probe: %v (warden %v)", err, tg != nil && tg.Warden)
		}
		scale, source := tg.TimeScale(context.Background())
		if scale != c.want || (source != "") != c.known || c.known && !strings.Contains(source, statusTimeScale) {
			t.Errorf("%s: scale %v from %q, want %v (known: %v)", c.status, scale, source, c.want, c.known)
		}
		srv.Close()
	}
}
