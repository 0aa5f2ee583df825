package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSamplerRates(t *testing.T) {
	t.Parallel()
	s := newSampler(time.Minute)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rates, first := s.rates("p")
	require.Nil(t, rates)
	require.True(t, first.IsZero())

	s.add(t0, map[string]uint64{"p": 100})
	rates, first = s.rates("p")
	require.Nil(t, rates, "one sample is no rate yet")
	require.Equal(t, t0, first)

	s.add(t0.Add(10*time.Second), map[string]uint64{"p": 150})
	s.add(t0.Add(20*time.Second), map[string]uint64{"p": 20}) // restarted: counts from zero
	rates, _ = s.rates("p")
	require.Equal(t, []rate{{at: t0.Add(10 * time.Second), perSec: 5}, {at: t0.Add(20 * time.Second), perSec: 2}}, rates)

	// Past the window: old samples go, but the last one before the
	// window's start stays, as the start of its first interval.
	s.add(t0.Add(75*time.Second), map[string]uint64{"p": 80, "q": 1})
	rates, first = s.rates("p")
	require.Equal(t, t0.Add(10*time.Second), first)
	require.Len(t, rates, 2)
	require.InDelta(t, 60.0/55, rates[1].perSec, 1e-9)

	// A pool gone for a whole window is forgotten.
	s.add(t0.Add(200*time.Second), map[string]uint64{"q": 2})
	rates, first = s.rates("p")
	require.Nil(t, rates)
	require.True(t, first.IsZero())
}

func TestChart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := newChart(nil, time.Time{}, now, 15*time.Minute)
	require.False(t, c.Has)
	require.Equal(t, 15*time.Minute, c.Span)
	require.NotContains(t, string(c.SVG), "polyline")

	rates := []rate{{at: now.Add(-20 * time.Second), perSec: 10}, {at: now, perSec: 40}}
	c = newChart(rates, now.Add(-30*time.Second), now, 15*time.Minute)
	require.True(t, c.Has)
	require.Equal(t, 30*time.Second, c.Span, "a fresh console charts what it has")
	require.InDelta(t, 40, c.Now, 0)
	require.InDelta(t, 40, c.Peak, 0)
	svg := string(c.SVG)
	require.True(t, strings.HasPrefix(svg, "<svg"))
	// The last point is at the right edge, the peak at the top.
	require.Contains(t, svg, `points="100.0,41.0 300.0,2.0"`)
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	require.Equal(t, "14d", fmtDuration(336*time.Hour))
	require.Equal(t, "1h30m", fmtDuration(90*time.Minute))
	require.Equal(t, "11s", fmtDuration(11*time.Second))
	require.Equal(t, "1,234,567", fmtNum(int64(1234567)))
	require.Equal(t, "-1,000", fmtNum(-1000))
	require.Equal(t, "12", fmtNum(uint64(12)))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, "never", fmtAgo(now, time.Time{}))
	require.Equal(t, "3 min ago", fmtAgo(now, now.Add(-3*time.Minute)))
	require.Equal(t, "in 14 d", fmtAgo(now, now.Add(336*time.Hour)))
	require.Equal(t, []string{"from: none", "reason: x", "to: 30d"}, fmtDetail(map[string]any{"to": "720h0m0s", "from": nil, "reason": "x"}))
	require.Equal(t, []string{`filter: {"pool":"p","state":"failed"}`},
		fmtDetail(map[string]any{"filter": map[string]any{"state": "failed", "pool": "p"}}))
	d, err := parseHorizon("14d")
	require.NoError(t, err)
	require.Equal(t, 336*time.Hour, d)
	_, err = parseHorizon("-1h")
	require.Error(t, err)
}
