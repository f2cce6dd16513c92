package bench

import (
	"strings"
	"testing"
	"time"
)

func TestClientRTTCountsTowardTTFB(t *testing.T) {
	_, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 1)
	cfg.RTT = 50 * time.Millisecond
	cfg.TimeScale = 2 // 25 ms of wall time per turn, read back as 50 ms
	res := runBench(t, cfg, false)
	if len(res.Turns) == 0 {
		t.Fatal("no turns")
	}
	for _, tr := range res.Turns {
		if tr.Error != "" {
			continue
		}
		if tr.TTFBS < 0.05 || tr.DurationS < tr.TTFBS {
			t.Errorf("turn %d: TTFB %.4fs, duration %.4fs; want TTFB >= the 0.05s round trip and duration >= TTFB", tr.Turn, tr.TTFBS, tr.DurationS)
		}
	}
	if res.Config.ClientRTT != 0.05 {
		t.Errorf("results record client_rtt_s %v, want 0.05", res.Config.ClientRTT)
	}
	cfg.RTT = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--client-rtt") {
		t.Errorf("negative RTT: err %v, want one naming --client-rtt", err)
	}
}
