package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleResults() *Results {
	f := func(v float64) *float64 { return &v }
	return &Results{
		URL: "http://127.0.0.1:1", Target: "warden", Model: "m", API: APIAnthropic,
		Variants: []string{"off", "sticky"},
		Config:   configJSON{Stages: []int{4, 8}, StageSeconds: 180},
		Stages: []StageSummary{
			{Variant: "off", Sessions: 4, Seconds: 180, SessionsPerHour: 180, OutputPerMin: 5886, TTFBP50: f(2.05), TTFBP95: f(3.5), ReplicasBusy: f(2.71), PrefixHitPct: f(56.2), StayedPct: f(40), BenchLagP99: f(0.005)},
			{Variant: "off", Sessions: 8, Seconds: 180, SessionsPerHour: 300, OutputPerMin: 8364, TTFBP50: f(2.33), TTFBP95: f(6.32)},
			{Variant: "sticky", Sessions: 4, Seconds: 180, SessionsPerHour: 240, OutputPerMin: 6744, TTFBP50: f(0.38), TTFBP95: f(2.84), ReplicasBusy: f(2.83), PrefixHitPct: f(86.4), StayedPct: f(100), BenchLagP99: f(0.004)},
			{Variant: "sticky", Sessions: 8, Seconds: 180, SessionsPerHour: 380, OutputPerMin: 10752, TTFBP50: f(0.48), TTFBP95: f(5.03), StayedPct: f(100)},
		},
		Turns: []TurnRecord{{Variant: "off", Sessions: 4, SessionID: "a,b", Turn: 1, TTFBS: 0.5, InStage: true, Error: `quote " here`}},
	}
}

func TestMarkdownMatchesReferenceColumns(t *testing.T) {
	md := Markdown(sampleResults())
	lines := strings.Split(strings.TrimSpace(md), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want header, rule and 2 rows:\n%s", len(lines), md)
	}
	want := "| sessions | sessions/h off→sticky | output tok/min off→sticky | TTFB p50 s off→sticky | TTFB p95 s off→sticky | replicas busy off→sticky | prefix hit % off→sticky | stayed on replica % off→sticky | bench lag p99 s off→sticky |"
	if lines[0] != want {
		t.Errorf("header\n got %s\nwant %s", lines[0], want)
	}
	// Both variants' stayed share: off's 40 as well as sticky's 100.
	for _, cell := range []string{"| 4 |", "180→240", "5886→6744", "2.05→0.38", "3.50→2.84", "2.71→2.83", "56.2→86.4", "| 40.0→100.0 |", "| 0.005→0.004 |"} {
		if !strings.Contains(lines[2], cell) {
			t.Errorf("row 4 %q lacks %q", lines[2], cell)
		}
	}
	if !strings.Contains(lines[3], "–→–") {
		t.Errorf("unknown values should print as –: %s", lines[3])
	}
	single := sampleResults()
	single.Variants = nil
	for i := range single.Stages {
		single.Stages[i].Variant = ""
	}
	single.Stages = single.Stages[:2]
	if h := strings.SplitN(Markdown(single), "\n", 2)[0]; strings.Contains(h, "→") || !strings.Contains(h, "| sessions/h |") {
		t.Errorf("single-variant header %q", h)
	}
}

func TestWriteAllOutputsParse(t *testing.T) {
	dir := t.TempDir()
	res := sampleResults()
	if err := WriteAll(dir, res); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, wantRows := range map[string]int{FileSummary: 1 + len(res.Stages), FileTurns: 1 + len(res.Turns)} {
		recs, err := csv.NewReader(bytes.NewReader(read(name))).ReadAll()
		if err != nil || len(recs) != wantRows {
			t.Fatalf("%s: %d records, err %v; want %d", name, len(recs), err, wantRows)
		}
	}
	var back Results
	if err := json.Unmarshal(read(FileJSON), &back); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if len(back.Stages) != 4 || *back.Stages[2].TTFBP50 != 0.38 || back.Stages[1].ReplicasBusy != nil ||
		back.Stages[2].BenchLagP99 == nil || *back.Stages[2].BenchLagP99 != 0.004 {
		t.Errorf("summary.json round trip lost values: %+v", back.Stages)
	}
	if string(read(FileTable)) != Markdown(res) {
		t.Errorf("table.md differs from the printed table")
	}
	svg := read(FileChart)
	if err := wellFormed(svg); err != nil {
		t.Fatalf("ttfb.svg is not well-formed XML: %v", err)
	}
	// 2 variants x (p50, p95); the 8-session stage of "off" p50/p95 are
	// known, so every series has two points and one polyline.
	if n := strings.Count(string(svg), "<polyline"); n != 4 {
		t.Errorf("ttfb.svg has %d polylines, want 4", n)
	}
}

func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func TestSVGWithoutData(t *testing.T) {
	res := sampleResults()
	res.Stages = nil
	var b bytes.Buffer
	if err := WriteSVG(&b, res); err != nil {
		t.Fatal(err)
	}
	if err := wellFormed(b.Bytes()); err != nil || strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
		t.Fatalf("empty chart: err %v\n%s", err, b.String())
	}
}

// A stage in which turns finished but no session did says why its
// sessions/h is not a rate; a stage whose TTFB tail is within the bench's
// own lag gets a note under the table, and only that stage.
func TestTableSaysWhatItCannotMeasure(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	res := &Results{Variants: []string{"off", "sticky"}, Config: configJSON{Stages: []int{1, 4}},
		Stages: []StageSummary{
			{Variant: "off", Sessions: 1, Seconds: 30, Turns: 3, TTFBP95: f(0.5), BenchLagP99: f(0.002)},
			{Variant: "off", Sessions: 4, Seconds: 30, Turns: 9, SessionsFinished: 1, SessionsPerHour: 120, TTFBP95: f(0.01), BenchLagP99: f(0.004)},
			{Variant: "sticky", Sessions: 1, Seconds: 30, Turns: 3, TTFBP95: f(0.5), BenchLagP99: f(0.002)},
			{Variant: "sticky", Sessions: 4, Seconds: 30, Turns: 0, TTFBP95: nil, BenchLagP99: f(0.004)},
		}}
	for i := range res.Stages {
		res.Stages[i].LagWarning = res.Stages[i].lagWarning()
	}
	md := Markdown(res)
	lines := strings.Split(md, "\n")
	if !strings.Contains(lines[2], "| "+NotASession+" |") { // said once for both variants
		t.Errorf("1-session row, no session finished: %s", lines[2])
	}
	if !strings.Contains(lines[3], "| 120→0 |") {
		t.Errorf("4-session row: a rate, and 0 where no turn finished either: %s", lines[3])
	}
	want := "> 4 sessions [off]: this stage's p95 is within the bench's own lag: the client, not the server, may set it (TTFB p95 0.010 s, bench lag p99 0.004 s)"
	if strings.Count(md, "> ") != 1 || !strings.Contains(md, "\n\n"+want+"\n") {
		t.Errorf("want one lag note, for 4 sessions [off]:\n%s", md)
	}
}

// A one-stage chart has no lines, only points: p50 and p95 of a variant
// must not be the same dot (issue 36: they were; only the line's dash told
// them apart).
func TestOneStageChartTellsP50FromP95(t *testing.T) {
	res := sampleResults()
	res.Config.Stages = []int{4}
	res.Stages = []StageSummary{res.Stages[0], res.Stages[2]}
	var b bytes.Buffer
	if err := WriteSVG(&b, res); err != nil || wellFormed(b.Bytes()) != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	style := map[string]string{} // a point's label -> its circle without position and tooltip
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "<circle") || !strings.Contains(line, "<title>") {
			continue
		}
		label := line[strings.Index(line, "<title>")+7 : strings.Index(line, ":")]
		attrs := strings.Fields(line[:strings.Index(line, ">")])[3:] // after cx, cy
		style[label] = strings.Join(attrs, " ")
	}
	if len(style) != 4 {
		t.Fatalf("points %v, want 4 (2 variants x p50, p95)", style)
	}
	for _, v := range res.Variants {
		if style[v+" p50"] == style[v+" p95"] {
			t.Errorf("%s: p50 and p95 drawn alike (%s)", v, style[v+" p50"])
		}
	}
}
