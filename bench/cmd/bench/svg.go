package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart draws the throughput of each contender as a horizontal bar (the
// median) with a whisker from the slowest to the fastest round, in plain
// SVG (no plotting dependency in platformd's module).
func (r *report) chart() string {
	var rows []*contenderReport
	for _, c := range r.Contenders {
		if len(c.Rounds) > 0 {
			rows = append(rows, c)
		}
	}
	const (
		width  = 900.0
		left   = 170.0
		right  = 110.0
		top    = 70.0
		rowH   = 38.0
		barH   = 22.0
		bottom = 60.0
	)
	height := top + rowH*float64(len(rows)) + bottom
	maxV := 1.0
	for _, c := range rows {
		maxV = math.Max(maxV, c.MsgsPerSec.Max)
	}
	step := niceStep(maxV / 5)
	axisMax := math.Ceil(maxV/step) * step
	plotW := width - left - right
	x := func(v float64) float64 { return left + plotW*v/axisMax }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("Messages/s draining %s messages (%s events + %s copies), %v queues",
		thousands(toFloat(r.Workload["messages"])), thousands(toFloat(r.Workload["events"])), thousands(toFloat(r.Workload["duplicates"])), r.Settings["queue_type"])
	fmt.Fprintf(&b, `<text x="20" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	sub := fmt.Sprintf("bar: median of the rounds, whiskers: slowest..fastest; %d cores, kernel %s, PostgreSQL %s, RabbitMQ %s",
		r.Machine.Cores, r.Machine.Kernel, firstWord(r.Machine.PostgreSQL), r.Machine.RabbitMQ)
	fmt.Fprintf(&b, `<text x="20" y="42" fill="#555" font-size="12">%s</text>`+"\n", html.EscapeString(sub))
	for v := 0.0; v <= axisMax+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", x(v), top-6, x(v), height-bottom+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n", x(v), height-bottom+20, thousands(v))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">messages per second</text>`+"\n", left+plotW/2, height-bottom+42)
	if raw := r.find("raw"); raw != nil && len(raw.Rounds) > 0 {
		tx := x(0.8 * raw.MsgsPerSec.Median)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", tx, top-6, tx, height-bottom+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#d62728" font-size="11">0.8 x raw</text>`+"\n", tx, top-10)
	}
	for i, c := range rows {
		y := top + rowH*float64(i)
		color := "#8c8c8c"
		switch {
		case c.Kind == kindPlatformd && c.SkipDedup:
			color = "#9ecae1"
		case c.Kind == kindPlatformd:
			color = "#3182bd"
		case c.Kind == kindRaw:
			color = "#bdbdbd"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+barH/2+4, html.EscapeString(c.Name))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s"/>`+"\n", left, y, x(c.MsgsPerSec.Median)-left, barH, color)
		cy := y + barH/2
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x(c.MsgsPerSec.Min), cy, x(c.MsgsPerSec.Max), cy)
		for _, v := range []float64{c.MsgsPerSec.Min, c.MsgsPerSec.Max} {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x(v), cy-5, x(v), cy+5)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x(c.MsgsPerSec.Max)+6, cy+4, thousands(c.MsgsPerSec.Median))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return s
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// thousands formats v rounded, with thin separators: 12 345.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
