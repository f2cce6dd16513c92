package report

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

func TestLogRange(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	lo, hi := logRange([]Series{{Y: []*float64{f(0.38), nil, f(82.8)}}})
	if lo != -1 || hi != 2 {
		t.Errorf("range of 0.38..82.8 = 1e%d..1e%d, want 1e-1..1e2", lo, hi)
	}
	lo, hi = logRange([]Series{{Y: []*float64{f(1), f(1)}}})
	if lo != 0 || hi != 1 {
		t.Errorf("range of 1..1 = 1e%d..1e%d, want 1e0..1e1", lo, hi)
	}
}

// parses reads b as one XML document: Unmarshal reads it to the end of its
// root element and fails on anything malformed.
func parses(b []byte) error {
	var doc struct{ XMLName xml.Name }
	return xml.Unmarshal(b, &doc)
}

// A linear chart: one polyline per series with two points or more, the
// labels escaped, no NaN for an empty one.
func TestLinearChart(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	c := Chart{Title: "output <tok/min>", XLabel: "sessions", X: []string{"4", "8", "16"}, Series: []Series{
		{Label: "4x1", Color: "#1f77b4", Y: []*float64{f(7168), f(11776), nil}},
		{Label: "2x2", Color: "#d62728", Y: []*float64{nil, f(9000), nil}},
	}}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	if err := parses(b.Bytes()); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, b.String())
	}
	if n := strings.Count(b.String(), "<polyline"); n != 1 {
		t.Errorf("%d polylines, want 1 (the one series with two points)", n)
	}
	if n := strings.Count(b.String(), "<circle"); n != 3 { // no hollow series: no markers in the legend
		t.Errorf("%d points, want 3", n)
	}
	if !strings.Contains(b.String(), "output &lt;tok/min&gt;") || !strings.Contains(b.String(), ">12954<") {
		t.Errorf("title or top tick (1.1 x 11776) missing:\n%s", b.String())
	}
	b.Reset()
	if err := (Chart{}).WriteSVG(&b); err != nil || parses(b.Bytes()) != nil || strings.Contains(b.String(), "NaN") {
		t.Errorf("an empty chart: %v\n%s", err, b.String())
	}
}

func TestTableMarkdownAndCSV(t *testing.T) {
	tab := Table{Header: []string{"layout", "sessions"}, Right: []bool{false, true},
		Rows: [][]string{{"2x1", "2"}, {"1x3", "skipped: a|b"}}}
	want := "| layout | sessions |\n| --- | ---:|\n| 2x1 | 2 |\n| 1x3 | skipped: a\\|b |\n"
	if got := tab.Markdown(); got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
	var b bytes.Buffer
	if err := tab.WriteCSV(&b); err != nil || b.String() != "layout,sessions\n2x1,2\n1x3,skipped: a|b\n" {
		t.Errorf("CSV %q, %v", b.String(), err)
	}
	if Num(nil, 1) != Missing || OptFloat(nil) != "" || Float(0.25) != "0.25" {
		t.Error("Num, OptFloat, Float")
	}
}

// Points tell series of one colour apart without their lines: a hollow
// series' points are rings, in the plot and in the legend alike.
func TestHollowPoints(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	c := Chart{X: []string{"4"}, Log: true, Series: []Series{
		{Label: "p50", Color: "#d62728", Y: []*float64{f(0.2)}},
		{Label: "p95", Color: "#d62728", Dashed: true, Hollow: true, Y: []*float64{f(0.9)}},
	}}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil || parses(b.Bytes()) != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	dot, ring := `r="3" fill="#d62728"`, `fill="white" stroke="#d62728"`
	if strings.Count(b.String(), dot) != 2 || strings.Count(b.String(), ring) != 2 {
		t.Errorf("want a dot and a ring in the plot and in the legend:\n%s", b.String())
	}
}
