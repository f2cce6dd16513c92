package panel

import (
	"bytes"
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// tierStatus is sampleStatus(n) with a 64 GiB host KV tier on every
// replica and distinct tier counters.
func tierStatus(n int) schema.Status {
	s := sampleStatus(n)
	for i := range s.Replicas {
		r := &s.Replicas[i]
		r.OffloadBackend, r.OffloadBytes = "native", 64<<30
		r.OffloadQueries, r.OffloadHits = float64(2_000_000+100_000*i), float64(500_000+50_000*i)
		r.OffloadHitRate = r.OffloadHits / r.OffloadQueries
		r.OffloadLoadedBytes, r.OffloadStoredBytes = float64(3<<30+i<<28), float64(40<<30+i<<30)
		r.OffloadFilled = []float64{0.6, 1, -1}[i%3] // part filled, full, an engine without the counter
	}
	s.Totals = schema.TotalsOf(s.Replicas)
	return s
}

func TestTotalsOfHostKVTier(t *testing.T) {
	got := schema.TotalsOf(tierStatus(3).Replicas)
	if got.OffloadBytes != 3*64<<30 || got.OffloadQueries != 6_300_000 || got.OffloadHits != 1_650_000 ||
		fmt.Sprintf("%.4f", got.OffloadHitRate) != "0.2619" {
		t.Errorf("totals %+v", got)
	}
	if s := sampleStatus(3); s.HasOffload() || s.Totals.OffloadHitRate != 0 {
		t.Error("a status without tiers has one")
	}
}

func TestFormatStatusTableShowsTheHostKVTier(t *testing.T) {
	s := tierStatus(3)
	s.Replicas[2].OffloadBackend, s.Replicas[2].OffloadBytes = "", 0 // one replica without a tier
	s.Replicas[2].OffloadQueries, s.Replicas[2].OffloadHits, s.Replicas[2].OffloadHitRate = 0, 0, 0
	s.Totals = schema.TotalsOf(s.Replicas)
	var b bytes.Buffer
	formatStatusTable(&b, s)
	out := b.String()
	// rank gpu port up infl sticky spill pin run wait kv kv-cap hit host h.hit sess rst
	want := map[string][]string{
		"rank": {"rank", "gpu", "port", "up", "infl", "sticky", "spill", "pin", "run", "wait", "kv", "kv", "cap", "hit", "host", "h.hit", "sess", "rst"},
		"0":    {"0", "0", "8101", "up", "3", "1100", "17", "0", "3", "0", "41.2%", "41.9k", "81.0%", "64.0G", "25.0%", "2", "0"},
		"1":    {"1", "1", "8102", "up", "4", "1131", "18", "2", "4", "1", "47.3%", "42.0k", "80.7%", "64.0G", "26.2%", "3", "1"},
		"2":    {"2", "2", "8103", "starting", "5", "1162", "19", "4", "5", "2", "53.4%", "42.0k", "80.4%", "-", "-", "4", "0"},
		// host: the sizes summed; h.hit: all tier hits / all tier queries.
		"all": {"all", "2/3", "12", "3393", "54", "6", "12", "3", "47.3%", "125.9k", "80.7%", "128G", "25.6%", "9", "1"},
	}
	for first, w := range want {
		if diff := cmp.Diff(w, rowFields(out, first)); diff != "" {
			t.Errorf("row %q (-want +got):\n%s\nin:\n%s", first, diff, out)
		}
	}
	for _, sub := range []string{offloadLegend,
		"host KV tier (vLLM native KV offloading): 128 GiB on 2 of 3 replicas; 1.05M of 4.10M prompt tokens\n" +
			"that missed the GPU cache found there (25.6%); 9.8 GiB loaded back, 123 GiB stored; filled"} {
		if !strings.Contains(out, sub) {
			t.Errorf("output lacks %q:\n%s", sub, out)
		}
	}
	b.Reset()
	formatStatusTable(&b, sampleStatus(3))
	if strings.Contains(b.String(), "h.hit") || strings.Contains(b.String(), "host KV tier") {
		t.Errorf("the tier's columns show without a tier:\n%s", b.String())
	}
}

func TestHostKVTierFits100Columns(t *testing.T) {
	s := tierStatus(8)
	for i := range s.Replicas { // six-digit counters, a tp=2 GPU group, terabyte tiers
		s.Replicas[i].Sticky += 900_000
		s.Replicas[i].GPUs = []string{"14", "15"}
		s.Replicas[i].OffloadBytes = 1 << 40
		s.Replicas[i].OffloadLoadedBytes *= 1000
	}
	s.Totals = schema.TotalsOf(s.Replicas)
	for _, f := range []func(*bytes.Buffer){
		func(b *bytes.Buffer) { formatStatusTable(b, s) },
		func(b *bytes.Buffer) { WriteSummary(b, s) },
	} {
		var b bytes.Buffer
		f(&b)
		for _, l := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(l); n > 100 {
				t.Errorf("line of %d columns: %q", n, l)
			}
		}
	}
}

func TestWriteSummaryHostKVTier(t *testing.T) {
	s := tierStatus(3)
	s.Sessions = 1 // not overcommitted now
	var b bytes.Buffer
	WriteSummary(&b, s)
	out := b.String()
	// The tier table follows the main one: replica host-tier filled
	// looked-up found host-hit loaded stored. Rows "0".."2" and "all"
	// appear in both tables; the second occurrence is the tier's. all's
	// filled is over the tiers whose fill is known (38.4 + 64 of 128 GiB).
	want := map[string][]string{
		"0":   {"0", "64.0G", "60.0%", "2.00M", "500.0k", "25.0%", "3.0G", "40.0G"},
		"1":   {"1", "64.0G", "full", "2.10M", "550.0k", "26.2%", "3.2G", "41.0G"},
		"2":   {"2", "64.0G", "-", "2.20M", "600.0k", "27.3%", "3.5G", "42.0G"},
		"all": {"all", "192G", "80.0%", "6.30M", "1.65M", "26.2%", "9.8G", "123G"},
	}
	i := strings.Index(out, "host tier")
	if i < 0 {
		t.Fatalf("no host tier table:\n%s", out)
	}
	for first, w := range want {
		if diff := cmp.Diff(w, rowFields(out[i:], first)); diff != "" {
			t.Errorf("tier row %q (-want +got):\n%s\nin:\n%s", first, diff, out)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "192 GiB on 3 of 3 replicas; 1.65M of 6.30M prompt tokens "+
		"that missed the GPU cache found there (26.2%); 9.8 GiB loaded back, 123 GiB stored; filled 80.0% (stored since "+
		"the engines started over the size). The usage reports' cached "+
		"tokens include the host tier's hits") {
		t.Errorf("summary lacks the tier's line:\n%s", out)
	}
	b.Reset()
	WriteSummary(&b, sampleStatus(3))
	if strings.Contains(b.String(), "host tier") {
		t.Errorf("tier table without a tier:\n%s", b.String())
	}
}

func TestFmtBytes(t *testing.T) {
	for _, c := range []struct {
		n    float64
		want string
	}{
		{0, "0"}, {-1, "0"}, {1 << 20, "1M"}, {512 << 20, "512M"}, {1<<30 - 1<<20, "1023M"}, {1 << 30, "1.0G"},
		{64 << 30, "64.0G"}, {99.9 * (1 << 30), "99.9G"}, {100 << 30, "100G"}, {1023 << 30, "1023G"},
		{1 << 40, "1.00T"}, {2.5 * (1 << 40), "2.50T"},
	} {
		if got := fmtBytes(c.n); got != c.want {
			t.Errorf("fmtBytes(%v) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := fmtIBytes(64 << 30); got != "64.0 GiB" {
		t.Errorf("fmtIBytes = %q", got)
	}
	if got := fmtIBytes(0); got != "0 B" {
		t.Errorf("fmtIBytes(0) = %q", got)
	}
	for r, want := range map[*schema.Replica]string{
		{OffloadBackend: "native", OffloadBytes: 8 << 30}: "8.0G", {OffloadBackend: "lmcache"}: "on", {}: "-",
	} {
		if got := fmtOffloadSize(*r); got != want {
			t.Errorf("fmtOffloadSize(%+v) = %q, want %q", *r, got, want)
		}
	}
}

// TestPageShowsTheHostKVTierInBrowser checks that panel.js adds the tier's
// columns and line when a replica has a tier (with the numbers and the
// sentence format.go writes), and hides them when none has.
func TestPageShowsTheHostKVTierInBrowser(t *testing.T) {
	browser := findBrowser(t)
	s := tierStatus(3)
	s.Replicas[2].OffloadBackend, s.Replicas[2].OffloadBytes = "", 0
	s.Replicas[2].OffloadQueries, s.Replicas[2].OffloadHits, s.Replicas[2].OffloadHitRate = 0, 0, 0
	s.Totals = schema.TotalsOf(s.Replicas)
	dom := runBrowser(t, browser, pageServer(t, s, s).URL+"/", "--dump-dom")
	want0 := []string{"0", "0", "8101", "up", "3", "1100", "17", "0", "3", "0", "41.2%", "41.9k", "81.0%", "64.0G", "25.0%", "2", "0"}
	if diff := cmp.Diff(want0, domCells(dom, "replica-0")); diff != "" {
		t.Errorf("replica 0 row (-want +got):\n%s", diff)
	}
	if got := domCells(dom, "replica-2"); len(got) != 17 || got[13] != "-" || got[14] != "-" {
		t.Errorf("replica 2 (no tier) row %q", got)
	}
	if got := domCells(dom, "replica-totals"); len(got) != 17 || got[13] != "128G" || got[14] != "25.6%" {
		t.Errorf("totals row %q", got)
	}
	if strings.Contains(dom, `<th class="offload" hidden`) {
		t.Error("the tier's headers stay hidden")
	}
	if got, want := domText(dom, "p", "offload"), offloadLine(s); got != want {
		t.Errorf("#offload = %q, want format.go's %q", got, want)
	}

	dom = runBrowser(t, browser, pageServer(t, sampleStatus(3), sampleStatus(3)).URL+"/", "--dump-dom")
	if got := domCells(dom, "replica-0"); len(got) != 15 {
		t.Errorf("without a tier, replica 0 has %d cells: %q", len(got), got)
	}
	if strings.Count(dom, `<th class="offload" hidden=""`) != 2 || !strings.Contains(dom, `<p id="offload" class="since" hidden=""></p>`) {
		t.Errorf("without a tier, its headers or line show:\n%s", dom)
	}
}
