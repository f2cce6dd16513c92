package sweep

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The four files of a sweep: the table with a skipped layout and the
// verdicts, the CSV and JSON with every row, a line per layout that ran.
func TestWriteReport(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	res := &Result{Layouts: []string{"4x1", "2x2", "1x4"}, Rows: []Row{
		{Layout: "4x1", DP: 4, TP: 1, Sessions: 4, OutputPerMin: 7168, TTFBP50: f(0.55), TTFBP95: f(3.23), PrefixHitPct: f(86.6), KVPerReplica: 38000, KVTotal: 152000, SessionsFit: 12},
		{Layout: "4x1", DP: 4, TP: 1, Sessions: 8, OutputPerMin: 11776, KVPerReplica: 38000, KVTotal: 152000},
		{Layout: "2x2", DP: 2, TP: 2, Sessions: 4, OutputPerMin: 6000, TTFBP50: f(0.4)},
		{Layout: "1x4", DP: 1, TP: 4, SkippedReason: "warden serve: out of memory | twice"},
	}}
	res.Verdicts = verdicts(res.Rows)
	dir := t.TempDir()
	if err := write(dir, res); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	md := read("sweep.md")
	for _, want := range []string{
		"| layout (dp x tp) | sessions | output tok/min | TTFB p50 s |",
		"| 4x1 | 4 | 7168 | 0.55 | 3.23 | 86.6 | 38000 (152000) | 12 |",
		"| 4x1 | 8 | 11776 | – | – | – | 38000 (152000) | 0 |",
		`| 1x4 | skipped: warden serve: out of memory \| twice |`,
		"- 4 sessions: 4x1 best on output (7168 tok/min, +19 % against 2x2's 6000 tok/min)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("sweep.md lacks %q:\n%s", want, md)
		}
	}
	if md != markdown(res) {
		t.Error("sweep.md is not what is printed")
	}
	recs, err := csv.NewReader(strings.NewReader(read("sweep.csv"))).ReadAll()
	if err != nil || len(recs) != 5 || recs[4][13] != "warden serve: out of memory | twice" || recs[2][5] != "" {
		t.Errorf("sweep.csv: %v %q", err, recs)
	}
	var back Result
	if err := json.Unmarshal([]byte(read("sweep.json")), &back); err != nil || len(back.Rows) != 4 {
		t.Errorf("sweep.json: %v %+v", err, back)
	}
	svg := read("sweep.svg")
	if n := strings.Count(svg, "<polyline"); n != 1 || strings.Count(svg, "<circle") != 3 || !strings.Contains(svg, ">2x2</text>") ||
		strings.Contains(svg, ">1x4</text>") {
		t.Errorf("sweep.svg: %d polylines (want 4x1's alone), points and legends:\n%s", n, svg)
	}
}
