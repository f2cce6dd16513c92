package sweep

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/internal/report"
)

// Row is one layout at one stage.
type Row struct {
	Layout        string   `json:"layout"`
	DP            int      `json:"dp"`
	TP            int      `json:"tp"`
	Sessions      int      `json:"sessions"`
	OutputPerMin  float64  `json:"output_tokens_per_min"`
	TTFBP50       *float64 `json:"ttfb_p50_s,omitempty"`
	TTFBP95       *float64 `json:"ttfb_p95_s,omitempty"`
	PrefixHitPct  *float64 `json:"prefix_hit_pct,omitempty"`
	KVPerReplica  int      `json:"kv_tokens_per_replica"`
	KVTotal       int      `json:"kv_tokens_total"`
	WorkingSet    int      `json:"working_set_tokens"` // a conversation's, at its last turn (measured)
	SessionsFit   int      `json:"sessions_fit"`
	Errors        int      `json:"errors"`
	SkippedReason string   `json:"skipped,omitempty"`
}

// Result is the whole sweep.
type Result struct {
	StartedAt  time.Time `json:"started_at"`
	ServeFlags []string  `json:"serve_flags"`
	EngineArgs []string  `json:"engine_args"`
	Layouts    []string  `json:"layouts"`
	Rows       []Row     `json:"rows"`
	Verdicts   []string  `json:"verdicts"`
}

// verdicts says per stage which layout wins output, p50, p95 and hits.
func verdicts(rows []Row) []string {
	var stages []int
	by := map[int][]Row{}
	for _, r := range rows {
		if r.SkippedReason != "" {
			continue
		}
		if _, ok := by[r.Sessions]; !ok {
			stages = append(stages, r.Sessions)
		}
		by[r.Sessions] = append(by[r.Sessions], r)
	}
	slices.Sort(stages)
	var out []string
	for _, n := range stages {
		rs := by[n]
		if len(rs) < 2 {
			continue
		}
		var parts []string
		parts = append(parts, best(rs, "output", func(r Row) (float64, bool) { return r.OutputPerMin, true }, true, "%.0f tok/min", false))
		parts = append(parts, best(rs, "TTFB p50", func(r Row) (float64, bool) { return deref(r.TTFBP50) }, false, "%.2f s", false))
		parts = append(parts, best(rs, "TTFB p95", func(r Row) (float64, bool) { return deref(r.TTFBP95) }, false, "%.2f s", false))
		parts = append(parts, best(rs, "prefix hits", func(r Row) (float64, bool) { return deref(r.PrefixHitPct) }, true, "%.1f %%", true))
		out = append(out, fmt.Sprintf("%d sessions: %s", n, strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), "; ")))
	}
	return out
}

func deref(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// best names the winning layout on one column and its margin over the
// runner-up, relative or (points, for percentages) as a difference; "" when
// fewer than two layouts have the value.
func best(rs []Row, what string, val func(Row) (float64, bool), higher bool, format string, points bool) string {
	type lv struct {
		name string
		v    float64
	}
	var vs []lv
	for _, r := range rs {
		if v, ok := val(r); ok {
			vs = append(vs, lv{r.Layout, v})
		}
	}
	if len(vs) < 2 {
		return ""
	}
	slices.SortStableFunc(vs, func(a, b lv) int {
		if higher {
			a, b = b, a
		}
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	w, r := vs[0], vs[1]
	margin := ""
	switch {
	case points:
		margin = fmt.Sprintf(", %+.1f points against %s's "+format, w.v-r.v, r.name, r.v)
	case r.v != 0:
		margin = fmt.Sprintf(", %+.0f %% against %s's "+format, 100*(w.v-r.v)/r.v, r.name, r.v)
	}
	return fmt.Sprintf("%s best on %s ("+format+"%s)", w.name, what, w.v, margin)
}

// table is the side-by-side table: a row per layout and stage, a skipped
// layout's reason in its stage column.
func table(res *Result) report.Table {
	t := report.Table{Header: []string{"layout (dp x tp)", "sessions", "output tok/min", "TTFB p50 s", "TTFB p95 s",
		"prefix hit %", "KV tokens per replica (total)", "sessions that fit"},
		Right: []bool{false, true, true, true, true, true, true, true}}
	for _, r := range res.Rows {
		if r.SkippedReason != "" {
			t.Rows = append(t.Rows, []string{r.Layout, "skipped: " + r.SkippedReason, "", "", "", "", "", ""})
			continue
		}
		t.Rows = append(t.Rows, []string{r.Layout, strconv.Itoa(r.Sessions), strconv.FormatFloat(r.OutputPerMin, 'f', 0, 64),
			report.Num(r.TTFBP50, 2), report.Num(r.TTFBP95, 2), report.Num(r.PrefixHitPct, 1),
			fmt.Sprintf("%d (%d)", r.KVPerReplica, r.KVTotal), strconv.Itoa(r.SessionsFit)})
	}
	return t
}

// markdown is the side-by-side table and the verdicts.
func markdown(res *Result) string {
	var b strings.Builder
	b.WriteString(table(res).Markdown())
	if len(res.Verdicts) > 0 {
		b.WriteString("\n")
		for _, v := range res.Verdicts {
			b.WriteString("- " + v + "\n")
		}
	}
	return b.String()
}

// writeCSV writes every row with all its columns (empty cells: unknown).
func writeCSV(w io.Writer, res *Result) error {
	t := report.Table{Header: []string{"layout", "dp", "tp", "sessions", "output_tokens_per_min", "ttfb_p50_s", "ttfb_p95_s",
		"prefix_hit_pct", "kv_tokens_per_replica", "kv_tokens_total", "working_set_tokens", "sessions_fit", "errors", "skipped"}}
	for _, r := range res.Rows {
		t.Rows = append(t.Rows, []string{r.Layout, strconv.Itoa(r.DP), strconv.Itoa(r.TP), strconv.Itoa(r.Sessions),
			report.Float(r.OutputPerMin), report.OptFloat(r.TTFBP50), report.OptFloat(r.TTFBP95), report.OptFloat(r.PrefixHitPct),
			strconv.Itoa(r.KVPerReplica), strconv.Itoa(r.KVTotal), strconv.Itoa(r.WorkingSet), strconv.Itoa(r.SessionsFit),
			strconv.Itoa(r.Errors), r.SkippedReason})
	}
	return t.WriteCSV(w)
}

// chartColors are the layouts' lines, in --layouts order.
var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// chart is output tok/min per stage, one line per layout that ran.
func chart(res *Result) report.Chart {
	var stages []int
	byLayout := map[string]map[int]float64{}
	for _, r := range res.Rows {
		if r.SkippedReason != "" {
			continue
		}
		if !slices.Contains(stages, r.Sessions) {
			stages = append(stages, r.Sessions)
		}
		if byLayout[r.Layout] == nil {
			byLayout[r.Layout] = map[int]float64{}
		}
		byLayout[r.Layout][r.Sessions] = r.OutputPerMin
	}
	slices.Sort(stages)
	c := report.Chart{Title: "output tok/min per stage, by layout (dp x tp)", XLabel: "sessions"}
	for _, n := range stages {
		c.X = append(c.X, strconv.Itoa(n))
	}
	for i, name := range res.Layouts {
		out, ok := byLayout[name]
		if !ok {
			continue
		}
		s := report.Series{Label: name, Color: chartColors[i%len(chartColors)]}
		for _, n := range stages {
			var y *float64
			if v, ok := out[n]; ok {
				y = &v
			}
			s.Y = append(s.Y, y)
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// write writes sweep.md, sweep.csv, sweep.json and sweep.svg into out.
func write(out string, res *Result) error {
	return report.WriteFiles(out,
		report.Text("sweep.md", markdown(res)),
		report.File{Name: "sweep.csv", Write: func(w io.Writer) error { return writeCSV(w, res) }},
		report.File{Name: "sweep.json", Write: func(w io.Writer) error { return report.WriteJSON(w, res) }},
		report.File{Name: "sweep.svg", Write: chart(res).WriteSVG})
}
