package sim_test

import (
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// BenchmarkSustainedSequences runs the sim as a real process on one core
// (GOMAXPROCS=1) at --sim-time-scale 10 with N concurrent streaming
// requests over HTTP, and reports lag%: the share of simulated time the
// engine lost because the CPU could not keep up (0 = it sustains N). The
// clients run in the benchmark process.
func BenchmarkSustainedSequences(b *testing.B) {
	for _, n := range []int{32, 512, 2048} {
		b.Run(fmt.Sprintf("seqs=%d", n), func(b *testing.B) {
			os.Setenv("GOMAXPROCS", "1")
			defer os.Unsetenv("GOMAXPROCS")
			p := simproc.Start(b, "--sim-time-scale", "10", "--max-num-seqs", fmt.Sprint(n), "--sim-kv-tokens", "2000000")
			body := fmt.Sprintf(`{"model":"test-model","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"%%s"}]}`, 100)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for j := 0; j < n; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, err := client.Post(p.URL+"/v1/chat/completions", "application/json",
							stringsReader(fmt.Sprintf(body, words(fmt.Sprint("s", i, "-", j), 100))))
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			resp, err := client.Get(p.URL + "/version")
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			v := parse(raw)
			busy, lag := v.Get("sim.busy_seconds").Float(), v.Get("sim.lag_seconds").Float()
			b.ReportMetric(100*lag/(busy+lag), "lag%")
			m := p.Metrics(b)
			b.ReportMetric(m["vllm:generation_tokens_total"]/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
