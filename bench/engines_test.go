package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// gateway stands for Envoy in front of engines: every API request goes to
// serving, but /metrics is answered by other (behind a gateway /metrics
// reaches one engine at random; here always the one that served nothing).
// It sends the client on with 307 (method and body kept), so the streams
// are the engine's own.
func gateway(t *testing.T, serving, other string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			http.Redirect(w, r, other+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		case "/warden/status":
			http.NotFound(w, r) // an engine's answer: not a warden
		default:
			http.Redirect(w, r, serving+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEnginesCountHitsBehindAGateway: through a gateway whose /metrics
// reaches an engine that served nothing, the target's counters show no
// prefix hits at all; with --engines naming both engines the bench sums
// their counters and finds the follow-ups' and the shared system prompt's
// hits, the ones the serving engine counted.
func TestEnginesCountHitsBehindAGateway(t *testing.T) {
	_, a0 := newFake(t, false)
	_, b0 := newFake(t, false)
	blind := runBench(t, smallConfig(gateway(t, a0.URL, b0.URL).URL, 2), false).Stages[0]
	if blind.PrefixHitPct != nil && *blind.PrefixHitPct != 0 {
		t.Fatalf("without --engines, the idle engine's counters gave %v%% hits; the test's gateway is not blind", *blind.PrefixHitPct)
	}

	served, a := newFake(t, false) // fresh engines: their caches empty
	_, b := newFake(t, false)
	gw := gateway(t, a.URL, b.URL)

	cfg := smallConfig(gw.URL, 2)
	cfg.Engines = []string{a.URL, b.URL}
	res := runBench(t, cfg, false)
	s := res.Stages[0]
	if s.Turns < 2 || s.Errors != 0 {
		for _, tr := range res.Turns {
			if tr.Error != "" {
				t.Logf("turn error: %s", tr.Error)
			}
		}
		t.Fatalf("turns %d, errors %d", s.Turns, s.Errors)
	}
	if s.PrefixHitPct == nil || *s.PrefixHitPct <= 0 || *s.PrefixHitPct >= 100 {
		t.Errorf("with --engines: prefix hit %% %s, want in (0, 100): the serving engine counted %v of %v tokens",
			num(&s, func(s *StageSummary) *float64 { return s.PrefixHitPct }, 1), served.hits, served.queries)
	}
	if len(res.Config.Engines) != 2 || !strings.Contains(Markdown(res), "--engines") {
		t.Errorf("the results do not say the hits came from the engines: %v\n%s", res.Config.Engines, Markdown(res))
	}
}

// TestEngineSampleSumsEveryEngine: one sample holds every engine's
// counters under its index, and the prefix delta sums them all.
func TestEngineSampleSumsEveryEngine(t *testing.T) {
	fa, a := newFake(t, false)
	fb, b := newFake(t, false)
	fa.hits, fa.queries, fb.hits, fb.queries = 30, 100, 50, 200
	tg := &Target{URL: a.URL, Engines: []string{a.URL, b.URL}, hc: http.DefaultClient}
	s, err := tg.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s["0"].Hits != 30 || s["1"].Queries != 200 {
		t.Fatalf("sample %+v, want engines 0 and 1 with their own counters", s)
	}
	hits, queries, _, ok := prefixDelta(sample{}, s)
	if !ok || hits != 80 || queries != 300 {
		t.Errorf("delta over both engines: %v hits of %v (ok %v), want 80 of 300", hits, queries, ok)
	}
}

// TestEnginesOneDownIsAnError: an engine of --engines that does not answer
// stops the run before any stage, naming the option and the engine.
func TestEnginesOneDownIsAnError(t *testing.T) {
	_, a := newFake(t, false)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	cfg := smallConfig(a.URL, 2)
	cfg.Engines = []string{a.URL, deadURL}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := (&Runner{Cfg: cfg, Log: quietLog()}).Run(ctx, false)
	if err == nil || !strings.Contains(err.Error(), "--engines") || !strings.Contains(err.Error(), deadURL) {
		t.Errorf("an engine down: %v, want an error naming --engines and %s", err, deadURL)
	}
}

// TestEnginesOptionParsed: --engines is a comma-separated list of base
// URLs; anything else is refused by name.
func TestEnginesOptionParsed(t *testing.T) {
	o := DefaultOptions()
	o.URL, o.AB, o.Engines = "http://127.0.0.1:1", "none", " http://127.0.0.1:2/, http://127.0.0.1:3 ,"
	cfg, err := o.Config()
	if err != nil || len(cfg.Engines) != 2 || cfg.Engines[0] != "http://127.0.0.1:2" || cfg.Engines[1] != "http://127.0.0.1:3" {
		t.Fatalf("engines %q, err %v", cfg.Engines, err)
	}
	o.Engines = "127.0.0.1:2"
	if _, err := o.Config(); err == nil || !strings.Contains(err.Error(), "--engines") {
		t.Errorf("an engine without a scheme: %v, want an error naming --engines", err)
	}
}
