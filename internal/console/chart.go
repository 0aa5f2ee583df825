package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// Chart geometry, in SVG user units.
const (
	chartWidth  = 300
	chartHeight = 56
)

// chart is a pool's processed/s over the chart window, ready to render.
type chart struct {
	// SVG is the inline chart; built here from numbers only.
	SVG template.HTML
	// Now and Peak are the latest and the highest rate; Has is false until
	// two samples exist.
	Now, Peak float64
	Has       bool
	// Span is the time the chart covers: the window, or less while the
	// console has sampled for less than that.
	Span time.Duration
}

// newChart lays rates out over the last span (window, or since the
// first sample when that is more recent): time left to right, the rate
// bottom to top scaled to the peak.
func newChart(rates []rate, first, now time.Time, window time.Duration) chart {
	c := chart{Span: window}
	if !first.IsZero() && now.Sub(first) < window {
		c.Span = max(time.Second, now.Sub(first).Round(time.Second))
	}
	window = c.Span
	for _, r := range rates {
		c.Peak = max(c.Peak, r.perSec)
	}
	if len(rates) > 0 {
		c.Has = true
		c.Now = rates[len(rates)-1].perSec
	}
	x := func(t time.Time) float64 {
		f := 1 - now.Sub(t).Seconds()/window.Seconds()
		return max(0, min(1, f)) * chartWidth
	}
	scale := c.Peak
	if scale <= 0 {
		scale = 1
	}
	y := func(v float64) float64 { return chartHeight - 2 - v/scale*(chartHeight-4) }
	var line strings.Builder
	for i, r := range rates {
		if i > 0 {
			line.WriteByte(' ')
		}
		fmt.Fprintf(&line, "%.1f,%.1f", x(r.at), y(r.perSec))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="processed per second, last 15 minutes">`, chartWidth, chartHeight)
	fmt.Fprintf(&b, `<line class="chart-base" x1="0" y1="%d" x2="%d" y2="%d"/>`, chartHeight-1, chartWidth, chartHeight-1)
	if len(rates) > 0 {
		first, last := x(rates[0].at), x(rates[len(rates)-1].at)
		fmt.Fprintf(&b, `<polygon class="chart-area" points="%.1f,%d %s %.1f,%d"/>`, first, chartHeight-1, line.String(), last, chartHeight-1)
		fmt.Fprintf(&b, `<polyline class="chart-line" points="%s"/>`, line.String())
	}
	b.WriteString(`</svg>`)
	c.SVG = template.HTML(b.String()) //nolint:gosec // built from formatted numbers and constants only
	return c
}
