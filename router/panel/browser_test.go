package panel

import (
	"context"
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// findBrowser returns a headless-capable Chromium, or skips the test.
func findBrowser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("WARDEN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no headless browser: install Debian's chromium (apt-get install -y chromium) to check the status page")
	return ""
}

// runBrowser runs headless Chromium on url with extra flags and returns
// its stdout.
func runBrowser(t *testing.T, browser, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000",
	}, extra...)
	cmd := exec.CommandContext(ctx, browser, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
	}
	return string(out)
}

// pageServer serves the page (whose embedded status is initial) and the
// JSON status (polled) on one loopback test server, as the admin endpoints do.
func pageServer(t *testing.T, initial, polled schema.Status) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("GET "+StatusPath, JSONHandler(func() schema.Status { return polled }))
	mux.Handle("/", PageHandler(func() schema.Status { return initial }))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

var (
	tagRE  = regexp.MustCompile(`<[^>]*>`)
	cellRE = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
)

// domCells returns the texts of the cells of <tr id="id"> in dom.
func domCells(dom, id string) []string {
	i := strings.Index(dom, `<tr id="`+id+`"`)
	if i < 0 {
		return nil
	}
	j := strings.Index(dom[i:], "</tr>")
	var cells []string
	for _, m := range cellRE.FindAllStringSubmatch(dom[i:i+j], -1) {
		cells = append(cells, strings.TrimSpace(tagRE.ReplaceAllString(m[1], "")))
	}
	return cells
}

// domText returns the text of the element with the given id, which must
// be a tag element (its text is taken up to the first </tag>).
func domText(dom, tag, id string) string {
	re := regexp.MustCompile(`(?s)<` + tag + `[^>]* id="` + regexp.QuoteMeta(id) + `"[^>]*>(.*?)</` + tag + `>`)
	m := re.FindStringSubmatch(dom)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(tagRE.ReplaceAllString(m[1], ""))
}

// TestPageRendersInBrowser loads the page in headless Chromium and checks
// that its script fetched /warden/status and rendered each number of it.
func TestPageRendersInBrowser(t *testing.T) {
	browser := findBrowser(t)
	initial := sampleStatus(3)
	initial.Warnings = []string{"from the initial render"}
	polled := sampleStatus(3)
	polled.Replicas[1].InFlight, polled.Replicas[1].Sticky = 77, 4242 // only the poll knows these
	polled.InFlight = 3 + 77 + 5
	polled.Warnings = []string{"from the poll"}
	polled.Sessions = 2 // not overcommitted now, so the page shows the peak
	polled.PeakOvercommit = &schema.OvercommitPeak{At: polled.Now, Sessions: 26, MeanContextTokens: 58_100, CapacityTokens: 1_200_000}
	srv := pageServer(t, initial, polled)
	dom := runBrowser(t, browser, srv.URL+"/", "--dump-dom")

	checkDOMRows(t, dom, polled)
	var cached, prompt float64
	for _, p := range polled.Series {
		cached += float64(p.CachedTokens)
		prompt += float64(p.CachedTokens + p.ComputedTokens)
	}
	for id, want := range map[string]string{
		"badge-policy": "policysticky", "badge-affinity": "affinityon", "badge-spill": "spill threshold8 (auto)",
		"badge-sticky": "sticky share97.3%", "badge-inflight": "in flight85", "badge-sessions": "sessions2",
		"share": fmtPct(cached / prompt), "model": "Qwen/Qwen3-4B-Instruct-2507",
	} {
		if got := domText(dom, "span", id); got != want {
			t.Errorf("#%s = %q, want %q", id, got, want)
		}
	}
	for _, sub := range []string{"(warden start, up 1h02m05s)", "<li>from the poll</li>",
		"26 sessions x 58.1k = 1.51M &gt; 1.20M tokens</li>",
		"<li>replica 2 metrics: dial tcp 127.0.0.1:8103: connect: connection refused</li>"} {
		if !strings.Contains(dom, sub) {
			t.Errorf("DOM lacks %q", sub)
		}
	}
	for _, k := range []string{"cached", "computed", "completion"} {
		if !regexp.MustCompile(`id="area-` + k + `"[^>]* d="M[0-9]`).MatchString(dom) {
			t.Errorf("chart area %s not drawn", k)
		}
	}
	if strings.Contains(dom, "<li>from the initial render</li>") {
		t.Error("the page never replaced its initial status with the polled one")
	}
}

// checkDOMRows checks the replica rows and the totals row of the rendered
// table against s (the polled status of TestPageRendersInBrowser).
func checkDOMRows(t *testing.T, dom string, s schema.Status) {
	t.Helper()
	// Replica 0 written out by hand; every row also against the Status.
	want0 := []string{"0", "0", "8101", "up", "3", "1100", "17", "0", "3", "0", "41.2%", "41.9k", "81.0%", "2", "0"}
	if diff := cmp.Diff(want0, domCells(dom, "replica-0")); diff != "" {
		t.Errorf("replica 0 row (-want +got):\n%s\nDOM:\n%s", diff, dom)
	}
	for _, r := range s.Replicas {
		want := []string{
			strconv.Itoa(r.Rank), fmtGPUs(r.GPUs), strconv.Itoa(r.Port), fmtUp(r), strconv.Itoa(r.InFlight),
			fmt.Sprint(r.Sticky), fmt.Sprint(r.SpilledIn), fmt.Sprint(r.Pinned), fmtNum(r.Running), fmtNum(r.Waiting),
			fmtPct(r.KVUsed), fmtTokens(float64(r.KVCapacityTokens)), fmtPct(r.HitRate),
			strconv.Itoa(r.ActiveSessions), strconv.Itoa(r.Restarts),
		}
		if diff := cmp.Diff(want, domCells(dom, fmt.Sprintf("replica-%d", r.Rank))); diff != "" {
			t.Errorf("replica %d row (-want +got):\n%s", r.Rank, diff)
		}
	}
	wantTotals := []string{"all", "", "", "2/3", "85", "6504", "54", "6", "12", "3", "47.3%", "125.9k", "80.7%", "9", "1"}
	if diff := cmp.Diff(wantTotals, domCells(dom, "replica-totals")); diff != "" {
		t.Errorf("totals row (-want +got):\n%s", diff)
	}
}

// TestPageScreenshot renders the page to a PNG; set WARDEN_PANEL_SCREENSHOT
// to a path to keep it (docs/panel.png is made that way).
func TestPageScreenshot(t *testing.T) {
	browser := findBrowser(t)
	s := sampleStatus(4)
	srv := pageServer(t, s, s)
	png := filepath.Join(t.TempDir(), "panel.png")
	runBrowser(t, browser, srv.URL+"/", "--hide-scrollbars", "--window-size=1240,960", "--screenshot="+png)
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 20_000 || string(b[1:4]) != "PNG" {
		t.Fatalf("screenshot: %d bytes, header %q", len(b), b[:8])
	}
	if keep := os.Getenv("WARDEN_PANEL_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
