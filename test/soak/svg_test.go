package soak

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
	"time"
)

// writeSVG draws every curve and every fault on one time axis: one panel
// per kind of resource, a red line at each fault's start (its kind above
// the panels), a grey one at each restart of daemon b. Written by hand:
// a few dozen lines of SVG need no plotting library.
func writeSVG(path string, samples []sample, faults, marks []fault, verdicts []verdict, title string) error {
	if len(samples) < 2 {
		return fmt.Errorf("svg: %d samples", len(samples))
	}
	var panels []string
	for _, s := range series {
		if len(panels) == 0 || panels[len(panels)-1] != s.panel {
			panels = append(panels, s.panel)
		}
	}
	const (
		left, right, top = 70.0, 260.0, 120.0
		plotW, panelH    = 900.0, 90.0
		gap              = 28.0
	)
	width := left + plotW + right
	height := top + float64(len(panels))*(panelH+gap) + 40
	t0, t1 := samples[0].at, samples[len(samples)-1].at
	span := t1.Sub(t0).Seconds()
	x := func(t time.Time) float64 { return left + plotW*t.Sub(t0).Seconds()/span }
	byName := map[string]verdict{}
	for _, v := range verdicts {
		byName[v.name] = v
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="16" font-size="13">%s</text>`+"\n", left, html.EscapeString(title))
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+gap)
		var names []string
		maxV := 0.0
		for _, s := range series {
			if s.panel != p {
				continue
			}
			names = append(names, s.name)
			for _, sm := range samples {
				if v := sm.v[s.name]; !math.IsNaN(v) {
					maxV = math.Max(maxV, v)
				}
			}
		}
		if maxV == 0 {
			maxV = 1
		}
		maxV *= 1.1
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-6, html.EscapeString(p))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text><text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n",
			left-4, y0+10, maxV, left-4, y0+panelH)
		// The last two thirds, where the slopes are fitted.
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#f3f3f3"/>`+"\n", left+plotW/3, y0+1, plotW*2/3-1, panelH-2)
		for j, n := range names {
			var pts []string
			flush := func() {
				if len(pts) > 1 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colors[j%len(colors)], strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for _, sm := range samples {
				v := sm.v[n]
				if math.IsNaN(v) {
					flush()
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(sm.at), y0+panelH-panelH*v/maxV))
			}
			flush()
			vd := byName[n]
			state := "flat"
			switch {
			case vd.growing:
				state = "GROWING"
			case vd.points == 0:
				state = "no data"
			}
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s: %s (%+.2f%s/min)</text>`+"\n",
				left+plotW+10, y0+14+float64(j)*14, colors[j%len(colors)], n, state, vd.slopePerMin, vd.unit)
		}
	}
	bottom := top + float64(len(panels))*(panelH+gap) - gap
	for _, m := range marks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#bbb" stroke-dasharray="2,3"/>`+"\n", x(m.start), top, x(m.start), bottom)
	}
	for _, f := range faults {
		fx := x(f.start)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d62728" stroke-opacity="0.6"/>`+"\n", fx, top-4, fx, bottom)
		fmt.Fprintf(&b, `<text transform="translate(%.1f,%.0f) rotate(-60)" fill="#d62728">%s</text>`+"\n", fx, top-8, html.EscapeString(f.kind))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">0</text><text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n",
		left, bottom+16, left+plotW, bottom+16, t1.Sub(t0).Round(time.Second))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#666">time since the start; red: faults; grey dashes: restarts of daemon b; shaded: the last two thirds, where slopes are fitted</text>`+"\n", left, bottom+32)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
