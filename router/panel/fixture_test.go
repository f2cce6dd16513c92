package panel

import (
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"time"
)

// sampleStatus is a realistic snapshot: n replicas with distinct numbers in
// every column, large enough counters to test widths, one replica down.
func sampleStatus(n int) schema.Status {
	since := time.Date(2026, 3, 14, 9, 30, 0, 0, time.UTC)
	now := since.Add(62*time.Minute + 5*time.Second)
	s := schema.Status{
		Since: since, Now: now, UptimeSeconds: now.Sub(since).Seconds(),
		Model: "Qwen/Qwen3-4B-Instruct-2507", Policy: "sticky", Affinity: true,
		SpillThreshold: 8, SpillAuto: true, StickyShare: 0.9731,
		Sessions: 13, SessionsSeen: 241,
		ActiveContextTokens: 12 * 21000, ActiveContextSessions: 12,
	}
	for i := 0; i < n; i++ {
		r := schema.Replica{
			Rank: i, GPUs: []string{fmt.Sprint(i)}, URL: fmt.Sprintf("http://127.0.0.1:%d", 8101+i),
			Port: 8101 + i, Up: true, State: "ready", Restarts: i % 2, Errors: uint64(7 * i), MaxNumSeqs: 32,
			InFlight: 3 + i, Requests: uint64(1200 + 37*i), New: uint64(40 + i), Sticky: uint64(1100 + 31*i),
			SpilledIn: uint64(17 + i), Pinned: uint64(2 * i), Failover: uint64(i % 3), ActiveSessions: 2 + i%3,
			PromptTokens: uint64(9_800_000 + 123_457*i), CachedTokens: uint64(7_900_000 + 98_765*i),
			CompletionTokens: uint64(250_000 + 1_234*i),
			Running:          float64(3 + i), Waiting: float64(i % 4), KVUsed: 0.412 + 0.061*float64(i),
			KVCapacityTokens: 41_936 + 16*i,
			PrefixQueries:    float64(10_000_000 + 131_071*i), PrefixHits: float64(8_100_000 + 77_777*i),
			EnginePrompt: float64(10_000_000 + 131_071*i), EngineGenerated: float64(260_000 + 999*i),
			Preemptions: float64(i * 5), ScrapedAt: now,
		}
		r.HitRate = r.PrefixHits / r.PrefixQueries
		s.Replicas = append(s.Replicas, r)
	}
	if n > 2 {
		s.Replicas[2].Up, s.Replicas[2].State = false, "starting"
		s.Replicas[2].ScrapeError = "dial tcp 127.0.0.1:8103: connect: connection refused"
	}
	for _, r := range s.Replicas {
		s.InFlight += r.InFlight
	}
	s.Totals = schema.TotalsOf(s.Replicas)
	for k := 0; k < 60; k++ {
		s.Series = append(s.Series, schema.Point{
			T: now.Add(time.Duration(k-60) * time.Minute), Seconds: 60,
			CachedTokens: uint64(60 * (1500 + 20*k)), ComputedTokens: uint64(60 * (400 + 5*(k%7))),
			CompletionTokens: uint64(60 * (110 + k%9)),
		})
	}
	return s
}
