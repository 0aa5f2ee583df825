package console

import (
	"sync"
	"time"
)

// sample is one reading of a pool's processed counter.
type sample struct {
	at        time.Time
	processed uint64
}

// rate is the processed/s of one sampling interval, ending at at.
type rate struct {
	at     time.Time
	perSec float64
}

// sampler keeps each pool's processed counter over the chart window. It is
// safe for concurrent use.
type sampler struct {
	window time.Duration

	mu    sync.Mutex
	pools map[string][]sample // oldest first
}

func newSampler(window time.Duration) *sampler {
	return &sampler{window: window, pools: map[string][]sample{}}
}

// add records the counters read at now; pools not in counters for a whole
// window (removed by a reload) are forgotten.
func (s *sampler) add(now time.Time, counters map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := now.Add(-s.window)
	for name, n := range counters {
		s.pools[name] = append(s.pools[name], sample{at: now, processed: n})
	}
	for name, ss := range s.pools {
		i := 0
		// Keep one sample at or before the cutoff: the first interval of
		// the window needs its start.
		for i+1 < len(ss) && !ss[i+1].at.After(cutoff) {
			i++
		}
		ss = ss[i:]
		if len(ss) == 0 || ss[len(ss)-1].at.Before(cutoff) {
			delete(s.pools, name)
			continue
		}
		s.pools[name] = ss
	}
}

// rates returns pool's processed/s per sampling interval, oldest first,
// and the time of its first sample (zero if none). A counter that went
// down (the pool restarted) counts from zero.
func (s *sampler) rates(pool string) ([]rate, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.pools[pool]
	if len(ss) == 0 {
		return nil, time.Time{}
	}
	if len(ss) < 2 {
		return nil, ss[0].at
	}
	out := make([]rate, 0, len(ss)-1)
	for i := 1; i < len(ss); i++ {
		dt := ss[i].at.Sub(ss[i-1].at).Seconds()
		if dt <= 0 {
			continue
		}
		d := ss[i].processed
		if d >= ss[i-1].processed {
			d -= ss[i-1].processed
		}
		out = append(out, rate{at: ss[i].at, perSec: float64(d) / dt})
	}
	return out, ss[0].at
}
