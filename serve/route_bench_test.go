package serve

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// BenchmarkHops measures what each warden in the path costs on loopback:
// one chat turn (non-streaming, 1 output token, simulator time scaled 1000x
// so the engine's own time is small) sent straight to a simulator engine
// ("direct"), through `warden serve` in front of it ("serve"), and through
// `warden route` in front of that serve ("route+serve": several hosts each
// running serve, one route in front). The three hit the same engine. Compare
// ns/op between the sub-benchmarks (ratios); -cpu 1,4 shows them under
// parallel load too.
//
//	go test -run '^$' -bench Hops -benchtime 2000x -count 3 ./serve
func BenchmarkHops(b *testing.B) {
	serve := startServeForBench(b)
	engine := serveEngineURL(b, serve)
	route := startRouteForBench(b, serve)
	for _, tc := range []struct{ name, url string }{{"direct", engine}, {"serve", serve}, {"route+serve", route}} {
		b.Run(tc.name, func(b *testing.B) { benchTurns(b, tc.url) })
	}
}

// benchTurns sends b.N chat turns, spread over a few sessions, in parallel
// goroutines (GOMAXPROCS of them; -cpu 1 is one client).
func benchTurns(b *testing.B, url string) {
	var n atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		session := "bench-" + strconv.FormatInt(n.Add(1), 10)
		body := `{"model":"bench","max_tokens":1,"messages":[{"role":"user","content":"a short turn of ` + session + `"}]}`
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-Id", session)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("%s: %s", url, resp.Status)
				return
			}
		}
	})
}

func startServeForBench(b *testing.B) string {
	b.Helper()
	port := simproc.FreePort(b)
	w := startWarden(b, "http://127.0.0.1:"+strconv.Itoa(port), "serve", "--model", "bench", "--engine", "sim",
		"--dp", "1", "--port", strconv.Itoa(port), "--log-dir", b.TempDir(), "--", "--sim-time-scale", "1000")
	b.Cleanup(func() { w.stop(b) })
	return w.url
}

func startRouteForBench(b *testing.B, serveURL string) string {
	b.Helper()
	w := startRoute(b, simproc.FreePort(b), "--replica", serveURL, "--state-file", "none")
	b.Cleanup(func() { w.stop(b) })
	return w.url
}

// serveEngineURL is the engine behind a `warden serve`, from its status.
func serveEngineURL(b *testing.B, serveURL string) string {
	b.Helper()
	w := &wardenProc{url: serveURL}
	st := w.status(b)
	if len(st.Replicas) != 1 {
		b.Fatalf("serve has %d replicas, want 1", len(st.Replicas))
	}
	return st.Replicas[0].URL
}
