package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Chart geometry (pixels).
const (
	svgW, svgH                 = 760, 440
	padL, padR, padT, padB     = 70, 180, 40, 50
	plotW, plotH               = svgW - padL - padR, svgH - padT - padB
	colorA, colorB, colorFrame = "#d62728", "#1f77b4", "#444"
)

// series is one line of the chart.
type series struct {
	label  string
	color  string
	dashed bool
	ys     []*float64 // one per stage, nil = missing
}

// chartSeries builds p50/p95 lines per variant, aligned with rows(res).
func chartSeries(res *Results) []series {
	rs := rows(res)
	names := res.Variants
	if len(names) != 2 {
		names = []string{""}
	}
	var out []series
	for vi, name := range names {
		color := colorA
		if vi == 1 {
			color = colorB
		}
		for _, q := range []string{"p50", "p95"} {
			s := series{label: strings.TrimSpace(name + " " + q), color: color, dashed: q == "p95"}
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
				s.ys = append(s.ys, v)
			}
			out = append(out, s)
		}
	}
	return out
}

// logRange returns the decades [lo, hi] (powers of ten) covering every
// positive value; (-1, 1) when there is none.
func logRange(ss []series) (lo, hi int) {
	minV, maxV := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.ys {
			if v != nil && *v > 0 {
				minV, maxV = math.Min(minV, *v), math.Max(maxV, *v)
			}
		}
	}
	if math.IsInf(minV, 1) {
		return -1, 1
	}
	lo, hi = int(math.Floor(math.Log10(minV))), int(math.Ceil(math.Log10(maxV)))
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// WriteSVG draws TTFB p50 (solid) and p95 (dashed) per stage on a log
// scale, one colour per variant.
func WriteSVG(w io.Writer, res *Results) error {
	ss := chartSeries(res)
	lo, hi := logRange(ss)
	rs := rows(res)
	x := func(i int) float64 { // stages are categories, evenly spaced
		return padL + plotW*(float64(i)+0.5)/float64(max(len(rs), 1))
	}
	y := func(v float64) float64 {
		return padT + plotH*(float64(hi)-math.Log10(v))/float64(hi-lo)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">TTFB per stage (log scale, seconds): p50 solid, p95 dashed</text>`+"\n", padL)
	for d := lo; d <= hi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow10(d)
			if d == hi && m > 1 {
				break
			}
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y(v)+4, fmtTick(v))
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y(v), padL+plotW, y(v), stroke)
		}
	}
	for i, r := range rs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(i), padT+plotH+18, r.sessions)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">concurrent sessions</text>`+"\n", padL+plotW/2, svgH-10)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, colorFrame)
	for si, s := range ss {
		drawSeries(&b, s, x, y)
		drawLegend(&b, si, s)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func drawSeries(b *bytes.Buffer, s series, x func(int) float64, y func(float64) float64) {
	dash := ""
	if s.dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	var pts []string
	for i, v := range s.ys {
		if v == nil || *v <= 0 {
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(*v)))
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %.3g s</title></circle>`+"\n",
			x(i), y(*v), s.color, xmlText(s.label), *v)
	}
	if len(pts) > 1 {
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
	}
}

func drawLegend(b *bytes.Buffer, i int, s series) {
	ly := padT + 10 + 20*i
	dash := ""
	if s.dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+14, ly, padL+plotW+44, ly, s.color, dash)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", padL+plotW+50, ly+4, xmlText("TTFB "+s.label))
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func fmtTick(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%g s", v)
	}
	return fmt.Sprintf("%g s", math.Round(v*1e6)/1e6)
}
