package bench

import (
	"io"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/internal/report"
)

// The chart's colours, one per variant.
const colorA, colorB = "#d62728", "#1f77b4"

// chart is the TTFB chart: p50 (solid, dots) and p95 (dashed, rings) per
// variant and stage, on a log scale, aligned with rows(res). The points
// differ as well as the lines: a one-stage chart has points alone.
func chart(res *Results) report.Chart {
	c := report.Chart{Title: "TTFB per stage (log scale, seconds): p50 solid with dots, p95 dashed with rings",
		XLabel: "concurrent sessions", Log: true, Unit: " s"}
	rs := rows(res)
	for _, r := range rs {
		c.X = append(c.X, strconv.Itoa(r.sessions))
	}
	names := res.Variants
	if len(names) != 2 {
		names = []string{""}
	}
	for vi, name := range names {
		color := colorA
		if vi == 1 {
			color = colorB
		}
		for _, q := range []string{"p50", "p95"} {
			label := strings.TrimSpace(name + " " + q)
			s := report.Series{Label: label, Legend: "TTFB " + label, Color: color, Dashed: q == "p95", Hollow: q == "p95"}
			for _, r := range rs {
				st := r.a
				if vi == 1 {
					st = r.b
				}
				var v *float64
				if st != nil {
					v = st.TTFBP50
					if q == "p95" {
						v = st.TTFBP95
					}
				}
				s.Y = append(s.Y, v)
			}
			c.Series = append(c.Series, s)
		}
	}
	return c
}

// WriteSVG draws TTFB p50 (solid, dots) and p95 (dashed, rings) per stage
// on a log scale, one colour per variant.
func WriteSVG(w io.Writer, res *Results) error { return chart(res).WriteSVG(w) }
