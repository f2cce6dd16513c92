package panel

import (
	"encoding/json"
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// hourStatus is an 8-replica status with an hour of series in buckets of
// the given width.
func hourStatus(bucket time.Duration) schema.Status {
	s := sampleStatus(8)
	s.Series = nil
	n := int(time.Hour / bucket)
	for k := 0; k < n; k++ {
		s.Series = append(s.Series, schema.Point{T: s.Now.Add(time.Duration(k-n) * bucket), Seconds: bucket.Seconds(),
			CachedTokens: uint64(1000 + k), ComputedTokens: uint64(300 + k%7), CompletionTokens: uint64(90 + k%5)})
	}
	return s
}

// BenchmarkStatusJSON measures what each poll of /warden/status costs, by
// series bucket width (the page polls every 2 s).
func BenchmarkStatusJSON(b *testing.B) {
	for _, bucket := range []time.Duration{time.Second, 10 * time.Second, time.Minute} {
		s := hourStatus(bucket)
		h := JSONHandler(func() schema.Status { return s })
		b.Run(fmt.Sprintf("bucket=%s", bucket), func(b *testing.B) {
			req := httptest.NewRequest("GET", StatusPath, nil)
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			js, _ := json.Marshal(s)
			b.ReportMetric(float64(len(js)), "bytes/status")
		})
	}
}

// BenchmarkScrape measures one /metrics scrape of the collector (8 replicas).
func BenchmarkScrape(b *testing.B) {
	s := hourStatus(10 * time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(func() schema.Status { return s }))
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPage measures serving the HTML page (embeds the status).
func BenchmarkPage(b *testing.B) {
	s := hourStatus(10 * time.Second)
	h := PageHandler(func() schema.Status { return s })
	req := httptest.NewRequest("GET", "/", nil)
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// BenchmarkTable measures rendering the terminal table (8 replicas).
func BenchmarkTable(b *testing.B) {
	s := hourStatus(10 * time.Second)
	for b.Loop() {
		formatStatusTable(io.Discard, s)
	}
}
