package realenvoy_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

// BenchmarkAddedLatency: what Envoy + the warden's picker adds to a short
// streamed turn, against `warden route` and against Envoy alone
// (least-request, --without-picker): one idle fast engine (the simulator at
// time scale 1000) behind all three, a ~50-token prompt, 8 output tokens,
// one conversation per side (sticky after its first turn). Every iteration
// sends one turn through each side, the order rotating, so the sides share
// the host's noise. Reports per side the time to the first streamed byte
// (TTFB) and to the end of the stream, p50 and p95, in milliseconds, and
// the picker's added p50 and p95 over `warden route`. scripts/epp-compare.sh
// runs it with -benchtime 300x.
func BenchmarkAddedLatency(b *testing.B) {
	if envoy.skip != "" {
		b.Skip(envoy.skip)
	}
	sim := simproc.Start(b, "--sim-time-scale", "1000", "--enable-prompt-tokens-details", "--max-num-seqs", "32")
	replica := []string{"--replica", sim.URL}
	bin := simproc.Binary(b)

	grpcPort, eppPort := simproc.FreePort(b), simproc.FreePort(b)
	eppOut := startProc(b, bin, append([]string{"epp", "--grpc-port", strconv.Itoa(grpcPort), "--port", strconv.Itoa(eppPort)}, replica...)...)
	simproc.Poll(b, "warden epp ready", func() bool { return strings.Contains(eppOut.String(), "endpoint picker ready") })
	withPicker := startEnvoy(b, bin, append(replica, "--epp", fmt.Sprintf("127.0.0.1:%d", grpcPort))...)
	alone := startEnvoy(b, bin, append(replica, "--without-picker")...)
	routePort := simproc.FreePort(b)
	routeOut := startProc(b, bin, append([]string{"route", "--port", strconv.Itoa(routePort), "--state-file", "none"}, replica...)...)
	route := fmt.Sprintf("http://127.0.0.1:%d", routePort)
	simproc.Poll(b, "warden route ready", func() bool { return get(route+"/health") == 200 })
	_ = routeOut

	sides := []struct{ name, url string }{{"epp", withPicker}, {"envoy", alone}, {"route", route}}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	ttfb := make([][]time.Duration, len(sides))
	total := make([][]time.Duration, len(sides))
	prompt := strings.Repeat("Please read the file and fix the bug. ", 6) // ~50 tokens with the template
	turn := func(s int) (time.Duration, time.Duration) {
		body := fmt.Sprintf(`{"model":"test-model","max_tokens":8,"stream":true,"messages":[{"role":"user","content":%q}]}`, prompt)
		req, _ := http.NewRequest(http.MethodPost, sides[s].url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("session-id", "latency-"+sides[s].name)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatalf("%s: %v", sides[s].name, err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.Peek(1); err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s: status %d, %v", sides[s].name, resp.StatusCode, err)
		}
		first := time.Since(start)
		var all strings.Builder
		if _, err := br.WriteTo(&all); err != nil || !strings.Contains(all.String(), "[DONE]") {
			b.Fatalf("%s: stream cut: %v\n%s", sides[s].name, err, all.String())
		}
		return first, time.Since(start)
	}
	for range 20 { // connections, the engine's cache, the picker's session: warm
		for s := range sides {
			turn(s)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range sides {
			s := (i + k) % len(sides)
			f, t := turn(s)
			ttfb[s] = append(ttfb[s], f)
			total[s] = append(total[s], t)
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for s, side := range sides {
		b.ReportMetric(ms(pct(ttfb[s], 0.50)), side.name+"-ttfb-p50-ms")
		b.ReportMetric(ms(pct(ttfb[s], 0.95)), side.name+"-ttfb-p95-ms")
		b.ReportMetric(ms(pct(total[s], 0.50)), side.name+"-turn-p50-ms")
		b.ReportMetric(ms(pct(total[s], 0.95)), side.name+"-turn-p95-ms")
	}
	b.ReportMetric(ms(pct(ttfb[0], 0.50)-pct(ttfb[2], 0.50)), "added-ttfb-p50-ms")
	b.ReportMetric(ms(pct(ttfb[0], 0.95)-pct(ttfb[2], 0.95)), "added-ttfb-p95-ms")
	b.ReportMetric(0, "ns/op") // the loop's time is three sides' turns: not a figure of any one
}

// pct is the q quantile of ds (nearest rank).
func pct(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func get(url string) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startProc runs bin with args until the benchmark ends; its output.
func startProc(tb testing.TB, bin string, args ...string) *simproc.SyncBuffer {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	out := &simproc.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if tb.Failed() {
			tb.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out.String())
		}
	})
	return out
}

// startEnvoy runs Envoy on the bootstrap `warden epp envoy-config` prints
// with flags; its listener's URL.
func startEnvoy(tb testing.TB, bin string, flags ...string) string {
	tb.Helper()
	port, admin := simproc.FreePort(tb), simproc.FreePort(tb)
	args := append([]string{"epp", "envoy-config", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--admin", fmt.Sprintf("127.0.0.1:%d", admin)}, flags...)
	cfg, err := exec.Command(bin, args...).Output()
	if err != nil {
		tb.Fatalf("warden %s: %v", strings.Join(args, " "), err)
	}
	path := filepath.Join(tb.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		tb.Fatal(err)
	}
	startProc(tb, envoy.bin, "-c", path, "--base-id", strconv.Itoa(1000+rand.IntN(1_000_000)), "-l", "warning", "--disable-hot-restart")
	simproc.Poll(tb, "Envoy live", func() bool { return get(fmt.Sprintf("http://127.0.0.1:%d/ready", admin)) == 200 })
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}
