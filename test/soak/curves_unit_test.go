package soak

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curve makes samples of one series every 10 s for minutes, valued by f
// (minutes since the start).
func curve(name string, minutes int, f func(m float64) float64) []sample {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []sample
	for i := 0; i <= minutes*6; i++ {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		v := map[string]float64{}
		for _, s := range series {
			v[s.name] = math.NaN()
		}
		v[name] = f(at.Sub(t0).Minutes())
		out = append(out, sample{at: at, v: v})
	}
	return out
}

func verdictOf(t *testing.T, vs []verdict, name string) verdict {
	t.Helper()
	for _, v := range vs {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no verdict for %s", name)
	return verdict{}
}

// TestJudgeFlagsGrowth: a daemon whose RSS climbs 5 MiB a minute for an
// hour is a leak; one that climbs at start-up and then stays (with noise
// and a restart's dip) is not, nor a broker node climbing back to its
// level after a restart.
func TestJudgeFlagsGrowth(t *testing.T) {
	leak := judge(curve("rss_a", 60, func(m float64) float64 { return 40 + 5*m }))
	if v := verdictOf(t, leak, "rss_a"); !v.growing || v.slopePerMin < 4.9 || v.slopePerMin > 5.1 {
		t.Fatalf("leaking curve: %+v, want growing at 5 MiB/min", v)
	}
	flat := judge(curve("rss_a", 60, func(m float64) float64 {
		switch {
		case m < 5:
			return 20 + 6*m // warming up, before the fitted window
		case m > 40 && m < 42:
			return 25 // restarted
		}
		return 50 + 3*math.Sin(m)
	}))
	if v := verdictOf(t, flat, "rss_a"); v.growing {
		t.Fatalf("flat curve judged growing: %+v", v)
	}
	// A node restarted early in the window climbs back to its level: the
	// line climbs, the level does not.
	recovery := judge(curve("broker_mem", 60, func(m float64) float64 {
		if m >= 21 && m < 31 {
			return 100 + 20*(m-21)
		}
		return 300
	}))
	if v := verdictOf(t, recovery, "broker_mem"); v.growing || v.growth <= v.tol {
		t.Fatalf("recovery after a restart: %+v, want a slope past tolerance judged flat", v)
	}
	// No readings: no verdict of growth either.
	if v := verdictOf(t, leak, "pg_mem"); v.growing || v.points != 0 {
		t.Fatalf("empty curve: %+v", v)
	}
}

// TestWriteSVG: the picture holds every series' verdict and every fault.
func TestWriteSVG(t *testing.T) {
	samples := curve("goroutines_a", 10, func(m float64) float64 { return 100 + 20*m })
	t0 := samples[0].at
	faults := []fault{{kind: "pg-restart", start: t0.Add(2 * time.Minute)}, {kind: "node-kill", start: t0.Add(5 * time.Minute)}}
	marks := []fault{{kind: "b-restart", start: t0.Add(3 * time.Minute)}}
	path := filepath.Join(t.TempDir(), "soak.svg")
	if err := writeSVG(path, samples, faults, marks, judge(samples), "soak: test <&>"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", "pg-restart", "node-kill", "goroutines_a: GROWING", "rss_a: no data", "soak: test &lt;&amp;&gt;", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
}
