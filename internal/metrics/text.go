package metrics

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseText reads a metrics page in the Prometheus text format (what
// Handler serves) and calls fn for each of its samples, named as in the
// text: a histogram's platformd_batch_size gives platformd_batch_size_count,
// _sum and _bucket (with label le). The parser is prometheus/common's.
func ParseText(r io.Reader, fn func(name string, labels map[string]string, v float64)) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("metrics: parse text: %w", err)
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			emitSamples(name, labels, m, fn)
		}
	}
	return nil
}

func emitSamples(name string, labels map[string]string, m *dto.Metric, fn func(string, map[string]string, float64)) {
	switch {
	case m.Counter != nil:
		fn(name, labels, m.GetCounter().GetValue())
	case m.Gauge != nil:
		fn(name, labels, m.GetGauge().GetValue())
	case m.Untyped != nil:
		fn(name, labels, m.GetUntyped().GetValue())
	case m.Histogram != nil:
		h := m.GetHistogram()
		fn(name+"_count", labels, float64(h.GetSampleCount()))
		fn(name+"_sum", labels, h.GetSampleSum())
		for _, b := range h.GetBucket() {
			fn(name+"_bucket", withLabel(labels, "le", formatBound(b.GetUpperBound())), float64(b.GetCumulativeCount()))
		}
	case m.Summary != nil:
		s := m.GetSummary()
		fn(name+"_count", labels, float64(s.GetSampleCount()))
		fn(name+"_sum", labels, s.GetSampleSum())
		for _, q := range s.GetQuantile() {
			fn(name, withLabel(labels, "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), q.GetValue())
		}
	}
}

func withLabel(labels map[string]string, k, v string) map[string]string {
	out := maps.Clone(labels)
	out[k] = v
	return out
}

func formatBound(b float64) string {
	if math.IsInf(b, +1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

// Scrape GETs the metrics page at url with client and calls fn for each
// of its samples (ParseText).
func Scrape(ctx context.Context, client *http.Client, url string, fn func(name string, labels map[string]string, v float64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := ParseText(resp.Body, fn); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
