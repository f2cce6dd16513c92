package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/proxy/compat"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
)

// BenchmarkOverhead compares a request through the warden with the same
// request sent straight to the engine (a local httptest fake) and through a
// bare httputil.ReverseProxy to it (the anchor: any Go proxy's hop): the
// difference between "bare" and "proxy" is what the warden's request path
// costs beyond the hop itself. ttfb-ns/op is the time to the first
// streamed byte.
func BenchmarkOverhead(b *testing.B) {
	e := newFakeEngine(b)
	_, front := testProxy(b, testConfig{}, e)
	target, _ := url.Parse(e.srv.URL)
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		FlushInterval: -1,
	})
	defer bare.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	// once sends one request and returns its time to the first byte and in all.
	once := func(b *testing.B, url, body string) (ttfb, total time.Duration) {
		start := time.Now()
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadByte(); err != nil {
			b.Fatal(err)
		}
		ttfb = time.Since(start)
		io.Copy(io.Discard, br)
		resp.Body.Close()
		return ttfb, time.Since(start)
	}
	for _, stream := range []bool{false, true} {
		body := chatBody("bench", stream, "")
		for _, target := range []struct{ name, url string }{{"direct", e.srv.URL}, {"bare", bare.URL}, {"proxy", front.URL}} {
			b.Run(fmt.Sprintf("stream=%v/%s", stream, target.name), func(b *testing.B) {
				var ttfb time.Duration
				for b.Loop() {
					t, _ := once(b, target.url, body)
					ttfb += t
				}
				b.ReportMetric(float64(ttfb.Nanoseconds())/float64(b.N), "ttfb-ns/op")
			})
		}
		// The ratio side by side: each iteration sends one request through
		// the bare proxy and one through the warden, in alternating order,
		// so the machine's drift (the other core's load, frequency) falls
		// on both alike. ns/op is the pair.
		b.Run(fmt.Sprintf("stream=%v/warden-vs-bare", stream), func(b *testing.B) {
			bareTTFB, bareT, wardenTTFB, wardenT := sideBySide(b, func(first bool) (time.Duration, time.Duration) {
				if first {
					return once(b, bare.URL, body)
				}
				return once(b, front.URL, body)
			})
			b.ReportMetric(float64(wardenT)/float64(bareT), "warden/bare")
			b.ReportMetric(float64(wardenTTFB)/float64(bareTTFB), "ttfb-warden/bare")
		})
	}
}

// eightReplicas is a loaded snapshot of 8 replicas.
func eightReplicas() []place.ReplicaView {
	snap := make([]place.ReplicaView, 8)
	for i := range snap {
		snap[i] = place.ReplicaView{Rank: i, Healthy: true, InFlight: i % 3, ActiveSessions: 4 + i%2,
			KVUsed: float64(i) / 10, MaxNumSeqs: 256, StaleRunning: i % 4, SentSince: i % 2}
	}
	return snap
}

// BenchmarkPick is the pure decision at 8 replicas, per policy.
func BenchmarkPick(b *testing.B) {
	snap := eightReplicas()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pol := range place.Policies() {
		cfg := place.Config{Policy: pol}
		b.Run(pol+"/new", func(b *testing.B) {
			for b.Loop() {
				place.Pick(snap, place.SessionView{Key: "k"}, cfg, rng)
			}
		})
		b.Run(pol+"/known", func(b *testing.B) {
			for b.Loop() {
				place.Pick(snap, place.SessionView{Key: "k", Known: true, Home: 3}, cfg, rng)
			}
		})
	}
}

// agentBody is a ~300 KB Claude Code request: billing block, large system
// prompt, tools, a long history, metadata at the end.
func agentBody(withMetadata bool) []byte {
	b := `{"model":"claude","max_tokens":128000,"stream":true,"messages":[]}`
	b, _ = sjson.Set(b, "system", []map[string]string{{"type": "text", "text": identity.BillingPrefix + " cc_version=2.1.332.0b8;"},
		{"type": "text", "text": strings.Repeat("You are Claude Code. Follow the rules. ", 400)}})
	for i := range 60 {
		role := []string{"user", "assistant"}[i%2]
		b, _ = sjson.Set(b, "messages.-1", map[string]any{"role": role, "content": []map[string]string{
			{"type": "text", "text": strings.Repeat(fmt.Sprintf("turn %d line of tool output \"quoted\" ", i), 110)}}})
	}
	if withMetadata {
		b, _ = sjson.Set(b, "metadata.user_id", `{"device_id":"11b3","account_uuid":"","session_id":"`+ccID+`"}`)
	}
	return []byte(b)
}

// BenchmarkExtract is session key extraction from a ~300 KB agent body.
func BenchmarkExtract(b *testing.B) {
	withMeta, noMeta := agentBody(true), agentBody(false)
	header := http.Header{"X-Claude-Code-Session-Id": {ccID}}
	cases := []struct {
		name string
		h    http.Header
		body []byte
		want string
	}{
		{"header", header, withMeta, identity.SourceClaudeHeader},
		{"metadata", http.Header{}, withMeta, identity.SourceClaudeMetadata},
		{"fingerprint", http.Header{}, noMeta, identity.SourceFingerprint},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if k := identity.Extract(c.h, c.body, nil); k.Source != c.want {
					b.Fatalf("source %s, want %s", k.Source, c.want)
				}
			}
		})
	}
	b.Run("scan+strip-billing+copy", func(b *testing.B) { // includes a 300 KB copy: it edits in place
		buf := make([]byte, len(withMeta))
		b.SetBytes(int64(len(withMeta)))
		b.ReportAllocs()
		for b.Loop() {
			copy(buf, withMeta)
			if out := compat.StripBilling(buf, identity.Scan(buf).System); len(out) == len(buf) {
				b.Fatal("nothing stripped")
			}
		}
	})
}

// sideBySide runs a pair of requests per b.Loop iteration, A then B and
// B then A in turn (send(true) is A), so that the machine's drift falls on
// both alike, and returns each side's summed time to first byte and total
// time.
func sideBySide(b *testing.B, send func(a bool) (ttfb, total time.Duration)) (aTTFB, aT, bTTFB, bT time.Duration) {
	i := 0
	for b.Loop() {
		aFirst := i%2 == 0
		t1, d1 := send(aFirst)
		t2, d2 := send(!aFirst)
		if !aFirst {
			t1, d1, t2, d2 = t2, d2, t1, d1
		}
		aTTFB, aT, bTTFB, bT = aTTFB+t1, aT+d1, bTTFB+t2, bT+d2
		i++
	}
	return aTTFB, aT, bTTFB, bT
}

// BenchmarkOverheadDecisionLog compares the warden with the decision log on
// and off over the same engine, side by side: each iteration sends one
// request through each, in alternating order (as warden-vs-bare in
// BenchmarkOverhead), so the machine's drift falls on both alike. ns/op is
// the pair; log/nolog is the ratio of their total times.
func BenchmarkOverheadDecisionLog(b *testing.B) {
	e := newFakeEngine(b)
	logged, front := testProxy(b, testConfig{Config: router.Config{DecisionLog: filepath.Join(b.TempDir(), "decisions.jsonl")}}, e)
	_, plain := testProxy(b, testConfig{}, e)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	once := func(b *testing.B, srv *httptest.Server, body string) (ttfb, total time.Duration) {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "bench-1")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadByte(); err != nil {
			b.Fatal(err)
		}
		ttfb = time.Since(start)
		io.Copy(io.Discard, br)
		resp.Body.Close()
		return ttfb, time.Since(start)
	}
	for _, stream := range []bool{false, true} {
		body := chatBody("bench", stream, "")
		b.Run(fmt.Sprintf("stream=%v/log-vs-nolog", stream), func(b *testing.B) {
			offTTFB, offT, onTTFB, onT := sideBySide(b, func(first bool) (time.Duration, time.Duration) {
				if first {
					return once(b, plain, body)
				}
				return once(b, front, body)
			})
			b.ReportMetric(float64(onT)/float64(offT), "log/nolog")
			b.ReportMetric(float64(onTTFB)/float64(offTTFB), "ttfb-log/nolog")
			b.ReportMetric(float64(onT.Nanoseconds())/float64(b.N), "log-ns/req")
			b.ReportMetric(float64(offT.Nanoseconds())/float64(b.N), "nolog-ns/req")
		})
	}
	if err := coreOf(logged).CloseDecisionLog(); err != nil {
		b.Fatal(err)
	}
	if n, _ := metric(b, coreOf(logged).Registry(), "warden_decision_log_dropped_total"); n > 0 {
		b.Logf("%v lines dropped", n)
	}
}
