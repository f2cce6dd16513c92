package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart geometry (pixels).
const (
	svgW, svgH             = 760, 440
	padL, padR, padT, padB = 70, 180, 40, 50
	plotW, plotH           = svgW - padL - padR, svgH - padT - padB
	colorFrame             = "#444"
)

// Chart is a line chart over categories (a bench's stages), one line per
// series.
type Chart struct {
	Title  string   // over the plot
	XLabel string   // under the categories
	X      []string // the categories, evenly spaced
	Log    bool     // a log scale in decades (values <= 0 are left out); else linear from 0
	Unit   string   // after tick labels and values, e.g. " s"
	Series []Series
}

// Series is one line of a Chart.
type Series struct {
	Label  string // in the points' tooltips
	Legend string // the legend's text; Label when empty
	Color  string
	Dashed bool
	// Hollow draws the series' points as rings rather than dots. A line's
	// dash tells series of one colour apart only where there is a line: a
	// chart of one category has points alone, so two series of one colour
	// (a bench's p50 and p95) need points that differ too.
	Hollow bool
	Y      []*float64 // one per category; nil: missing
}

// marker is a point's circle at (x, y) in s's style, with a tooltip when
// title is not empty.
func (s Series) marker(x, y float64, title string) string {
	style := fmt.Sprintf(`r="3" fill="%s"`, s.Color)
	if s.Hollow {
		style = fmt.Sprintf(`r="3.5" fill="white" stroke="%s" stroke-width="2"`, s.Color)
	}
	if title == "" {
		return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" %s/>`, x, y, style)
	}
	return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" %s><title>%s</title></circle>`, x, y, style, xmlText(title))
}

// scale maps values to the plot's height and says where the ticks go.
type scale struct {
	y     func(v float64) float64
	ticks []tick
	value func(v float64) string // a point's value in its tooltip
}

type tick struct {
	v     float64
	label string // "" for a grid line without a label
}

// logRange returns the decades [lo, hi] (powers of ten) covering every
// positive value; (-1, 1) when there is none.
func logRange(ss []Series) (lo, hi int) {
	minV, maxV := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.Y {
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

// logScale spans logRange's decades, with grid lines at 1, 2 and 5 of each
// and labels at the powers of ten.
func (c Chart) logScale() scale {
	lo, hi := logRange(c.Series)
	sc := scale{
		y:     func(v float64) float64 { return padT + plotH*(float64(hi)-math.Log10(v))/float64(hi-lo) },
		value: func(v float64) string { return fmt.Sprintf("%.3g", v) },
	}
	for d := lo; d <= hi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow10(d)
			if d == hi && m > 1 {
				break
			}
			t := tick{v: v}
			if m == 1 {
				t.label = logTick(v) + c.Unit
			}
			sc.ticks = append(sc.ticks, t)
		}
	}
	return sc
}

func logTick(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%g", math.Round(v*1e6)/1e6)
}

// linearScale runs from 0 to a tenth above the largest value, with five
// labelled grid lines.
func (c Chart) linearScale() scale {
	maxV := 0.0
	for _, s := range c.Series {
		for _, v := range s.Y {
			if v != nil {
				maxV = math.Max(maxV, *v)
			}
		}
	}
	top := maxV * 1.1
	if top <= 0 {
		top = 1
	}
	decimals := 0
	if top < 10 {
		decimals = 2
	}
	format := func(v float64) string { return strconv.FormatFloat(v, 'f', decimals, 64) }
	sc := scale{y: func(v float64) float64 { return padT + plotH*(1-v/top) }, value: format}
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		sc.ticks = append(sc.ticks, tick{v: v, label: format(v) + c.Unit})
	}
	return sc
}

// WriteSVG draws the chart.
func (c Chart) WriteSVG(w io.Writer) error {
	sc := c.linearScale()
	if c.Log {
		sc = c.logScale()
	}
	x := func(i int) float64 { // categories, evenly spaced
		return padL + plotW*(float64(i)+0.5)/float64(max(len(c.X), 1))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", padL, xmlText(c.Title))
	for _, t := range sc.ticks {
		stroke := "#eee"
		if t.label != "" {
			stroke = "#ccc"
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, sc.y(t.v)+4, xmlText(t.label))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, sc.y(t.v), padL+plotW, sc.y(t.v), stroke)
	}
	for i, name := range c.X {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(i), padT+plotH+18, xmlText(name))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, svgH-10, xmlText(c.XLabel))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, colorFrame)
	markers := false // the legend shows the points' markers where they differ
	for _, s := range c.Series {
		markers = markers || s.Hollow
	}
	for i, s := range c.Series {
		c.drawSeries(&b, s, x, sc)
		drawLegend(&b, i, s, markers)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func (c Chart) drawSeries(b *bytes.Buffer, s Series, x func(int) float64, sc scale) {
	dash := ""
	if s.Dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	var pts []string
	for i, v := range s.Y {
		if v == nil || (c.Log && *v <= 0) {
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), sc.y(*v)))
	}
	if len(pts) > 1 { // the line first: the points on top of it
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.Color, dash)
	}
	for i, v := range s.Y {
		if v == nil || (c.Log && *v <= 0) {
			continue
		}
		b.WriteString(s.marker(x(i), sc.y(*v), s.Label+": "+sc.value(*v)+c.Unit) + "\n")
	}
}

func drawLegend(b *bytes.Buffer, i int, s Series, marker bool) {
	ly := padT + 10 + 20*i
	dash := ""
	if s.Dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	legend := s.Legend
	if legend == "" {
		legend = s.Label
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+14, ly, padL+plotW+44, ly, s.Color, dash)
	if marker {
		b.WriteString(s.marker(float64(padL+plotW+29), float64(ly), "") + "\n")
	}
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", padL+plotW+50, ly+4, xmlText(legend))
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
