package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/wardenproc"
)

// tool returns the path of a Prometheus program (prometheus, promtool), or
// skips the test when there is none, unless WARDEN_REQUIRE_PROMETHEUS=1
// (set by .ci/run once it installed Debian's prometheus package), which
// makes a missing program a failure.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("WARDEN_REQUIRE_PROMETHEUS") == "1" {
		t.Fatalf("WARDEN_REQUIRE_PROMETHEUS=1 but %s is not on PATH: %v", name, err)
	}
	t.Skipf("SKIPPED: no %s on PATH (Debian: apt-get install prometheus; .ci/run installs it)", name)
	return ""
}

// started runs a program in its own process group, killed with its group
// when the test ends.
func started(t *testing.T, name string, args ...string) (*exec.Cmd, *simproc.SyncBuffer, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(name, args...)
	out := &simproc.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), out)
		}
	})
	return cmd, out, exited
}

// promResult is an answer of Prometheus' /api/v1/query.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func query(base, expr string) (promResult, error) {
	var r promResult
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", resp.Status, err)
	}
	if r.Status != "success" {
		return r, fmt.Errorf("%s: %s", resp.Status, r.Error)
	}
	return r, nil
}

// TestDashboardQueriesAgainstPrometheus is the dashboard's check against
// the real thing: Debian's Prometheus scrapes `warden serve --engine sim
// --dp 2` once a second while `warden bench` drives a short run, and then
// every query of the dashboard goes through Prometheus' HTTP API with every
// box and replica chosen. Each query must parse and run; each one not
// marked NoDataUntil must return data, and at least four in five of all.
func TestDashboardQueriesAgainstPrometheus(t *testing.T) {
	prom := tool(t, "prometheus")
	bin := simproc.Binary(t)
	dir := t.TempDir()

	wport := simproc.FreePort(t)
	warden := "http://127.0.0.1:" + strconv.Itoa(wport)
	_, _, wexited := started(t, bin, "serve", "--model", "demo", "--engine", "sim", "--dp", "2",
		"--port", strconv.Itoa(wport), "--log-dir", filepath.Join(dir, "runs"), "--stop-grace", "5s",
		"--", "--sim-time-scale", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := wardenproc.Poll(ctx, &http.Client{Timeout: 2 * time.Second}, warden, 100*time.Millisecond, wexited); err != nil {
		t.Fatalf("warden serve not ready: %v", err)
	}

	pport := simproc.FreePort(t)
	promURL := "http://127.0.0.1:" + strconv.Itoa(pport)
	cfg := filepath.Join(dir, "prometheus.yml")
	rules, err := filepath.Abs("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: warden
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, rules, wport)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, pexited := started(t, prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(pport))
	waitFor(t, pexited, "Prometheus ready", func() bool {
		resp, err := http.Get(promURL + "/-/ready")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	// A short bench: two sessions, off then sticky, about 10 s each.
	bench := exec.Command(bin, "bench", "--url", warden, "--stages", "2", "--stage", "200s", "--drain", "20s",
		"--turns", "3", "--first-tokens", "1500", "--system-tokens", "500", "--out", filepath.Join(dir, "bench"))
	if out, err := bench.CombinedOutput(); err != nil {
		t.Fatalf("warden bench: %v\n%s", err, out)
	}
	// Prometheus has scraped the warden after the bench ended.
	end := float64(time.Now().Unix())
	waitFor(t, pexited, "a scrape after the bench", func() bool {
		r, err := query(promURL, `max(timestamp(warden_replica_up))`)
		if err != nil || len(r.Data.Result) == 0 {
			return false
		}
		v, _ := strconv.ParseFloat(fmt.Sprint(r.Data.Result[0].Value[1]), 64)
		return v > end
	})

	qs := Queries()
	if len(qs) < 6 {
		t.Errorf("the dashboard has %d queries, want at least 6", len(qs))
	}
	withData := 0
	for _, q := range qs {
		expr := Resolve(q.Expr, "2m") // Grafana's $__rate_interval; the bench ended seconds ago
		r, err := query(promURL, expr)
		switch {
		case err != nil:
			t.Errorf("query %q: %v", expr, err)
		case len(r.Data.Result) > 0:
			withData++
			t.Logf("data (%d series): %s", len(r.Data.Result), oneLine(q.Expr))
		case q.NoDataUntil != "":
			t.Logf("no data, as expected until %s: %s", q.NoDataUntil, oneLine(q.Expr))
		default:
			t.Errorf("no data from a warden that served a bench: %s", expr)
		}
	}
	t.Logf("%d of the dashboard's %d queries returned data", withData, len(qs))
	checkRulesHealthy(t, promURL)
	if withData*5 < len(qs)*4 {
		t.Errorf("%d of %d queries returned data, want at least four in five", withData, len(qs))
	}
}

// waitFor polls cond every 100 ms until it holds; it fails the test when
// the process watched exits first or two minutes pass.
func waitFor(t *testing.T, exited <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		select {
		case <-exited:
			t.Fatalf("waiting for %s: the process exited", what)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// checkRulesHealthy: the alert rules, loaded by the same Prometheus, have
// all been evaluated against the warden's series without an error, and none
// fires on a healthy warden that served a bench.
func checkRulesHealthy(t *testing.T, promURL string) {
	t.Helper()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, State, LastError string
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	n := 0
	waitFor(t, nil, "the alert rules evaluated", func() bool {
		resp, err := http.Get(promURL + "/api/v1/rules")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Data.Groups) == 0 {
			return false
		}
		n = 0
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				if rule.Health == "unknown" {
					return false
				}
				n++
			}
		}
		return true
	})
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			if rule.Health != "ok" {
				t.Errorf("alert %s: health %s: %s", rule.Name, rule.Health, rule.LastError)
			}
			if rule.State == "firing" {
				t.Errorf("alert %s fires on a healthy warden", rule.Name)
			}
		}
	}
	t.Logf("%d alert rules evaluated without error", n)
}
