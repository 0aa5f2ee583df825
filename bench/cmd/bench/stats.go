package main

import (
	"math"
	"slices"
	"time"
)

// spread summarises the values of one measure over the rounds.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// RelSpread is (max-min)/median: how much the rounds disagree.
	RelSpread float64 `json:"rel_spread"`
	N         int     `json:"n"`
}

func summarize(values []float64) spread {
	if len(values) == 0 {
		return spread{}
	}
	v := slices.Clone(values)
	slices.Sort(v)
	s := spread{Median: median(v), Min: v[0], Max: v[len(v)-1], N: len(v)}
	if s.Median != 0 {
		s.RelSpread = (s.Max - s.Min) / s.Median
	}
	return s
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// percentile of sorted durations, nearest-rank (p in [0,100]).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}
