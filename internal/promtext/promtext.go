// Package promtext reads Prometheus text expositions, such as vLLM's
// /metrics, with prometheus/common/expfmt: the one parser of the proxy's
// engine scrape, the bench's samples and the tests' helpers.
package promtext

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one exposition, by name.
type Families map[string]*dto.MetricFamily

// Parse reads one exposition. (A zero-value expfmt.TextParser panics; this
// builds a valid one.)
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return Families(fams), nil
}

// Value is a sample's value, whether it is a gauge, a counter or untyped.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Sum adds name's samples over all their labels; ok is false when the
// exposition has no such family.
func (f Families) Sum(name string) (total float64, ok bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		total += Value(m)
	}
	return total, true
}

// Counter is Sum of base+"_total", or of base where an engine exports the
// counter without the suffix.
func (f Families) Counter(base string) (float64, bool) {
	if v, ok := f.Sum(base + "_total"); ok {
		return v, true
	}
	return f.Sum(base)
}

// CounterBy is Counter per value of label (samples without it under "").
func (f Families) CounterBy(base, label string) (map[string]float64, bool) {
	name := base + "_total"
	if f[name] == nil {
		name = base
	}
	return f.SumBy(name, label)
}

// SumBy adds name's samples per value of label (samples without it under
// ""); ok is false when there is no such family.
func (f Families) SumBy(name, label string) (map[string]float64, bool) {
	fam := f[name]
	if fam == nil {
		return nil, false
	}
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		key, _ := labelValue(m, label)
		out[key] += Value(m)
	}
	return out, true
}

// Split divides the exposition by the values of label: for each value,
// the families with only the samples that carry it. Samples without the
// label are shared: they go into every part. Nil when no sample has the
// label.
func (f Families) Split(label string) map[string]Families {
	var out map[string]Families
	for _, fam := range f {
		for _, m := range fam.GetMetric() {
			if v, has := labelValue(m, label); has && out[v] == nil {
				if out == nil {
					out = map[string]Families{}
				}
				out[v] = Families{}
			}
		}
	}
	for v, part := range out {
		for name, fam := range f {
			var keep []*dto.Metric
			for _, m := range fam.GetMetric() {
				if got, has := labelValue(m, label); !has || got == v {
					keep = append(keep, m)
				}
			}
			if len(keep) > 0 {
				part[name] = &dto.MetricFamily{Name: fam.Name, Help: fam.Help, Type: fam.Type, Metric: keep}
			}
		}
	}
	return out
}

// labelValue is m's value of label, and whether it has it.
func labelValue(m *dto.Metric, label string) (string, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == label {
			return l.GetValue(), true
		}
	}
	return "", false
}
