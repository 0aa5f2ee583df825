package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/state"
)

// DuplicateAgeFlushIntervalDefault is how often, at most, a pool adds the
// duplicate ages it noted to platform.duplicate_age (and once more when it
// stops).
const DuplicateAgeFlushIntervalDefault = time.Minute

// duplicateAgeFlushTimeout bounds one flush.
const duplicateAgeFlushTimeout = 10 * time.Second

// sourceIndex is the index of a duplicate source in poolMetrics' and
// counters' per-source arrays.
func sourceIndex(source string) int {
	switch source {
	case metrics.SourceRedelivery:
		return 0
	case metrics.SourceReplay:
		return 1
	default:
		return 2
	}
}

// noteAges records the ages of acked duplicates (their skip time is now):
// the histogram, the max gauge, and the pool's accumulator, whose flusher
// it wakes. No statement runs here: the flusher writes at most once per
// DuplicateAgeFlushInterval.
func (c *counters) noteAges(ages []state.DuplicateAge) {
	if len(ages) == 0 {
		return
	}
	now := time.Now()
	for i := range ages {
		a := &ages[i]
		a.At = now
		k := sourceIndex(a.Source)
		c.m.dupAge[k].Observe(a.Age.Seconds())
		for {
			old := c.ageMax[k].Load()
			if int64(a.Age) <= old {
				break
			}
			if c.ageMax[k].CompareAndSwap(old, int64(a.Age)) {
				c.m.dupAgeMax[k].Set(a.Age.Seconds())
				break
			}
		}
	}
	if c.ages == nil || !c.ages.Add(ages) {
		return
	}
	select {
	case c.agesNoted <- struct{}{}:
	default:
	}
}

// DuplicateAges returns the pool's accumulator of duplicate ages: what it
// noted and has not yet written to platform.duplicate_age
// (state.DuplicateAges.Pending). Safe for concurrent use.
func (p *Pool) DuplicateAges() *state.DuplicateAges { return p.count.ages }

// flushDuplicateAges writes the noted duplicate ages as they come, at most
// once per DuplicateAgeFlushInterval, until ctx ends (the pool's stop then
// flushes what is left).
func (p *Pool) flushDuplicateAges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.count.agesNoted:
		}
		p.flushAges(ctx)
		t := time.NewTimer(p.cfg.DuplicateAgeFlushInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// flushAges writes what the accumulator holds, in one statement; on an
// error it is kept for the next flush.
func (p *Pool) flushAges(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), duplicateAgeFlushTimeout)
	defer cancel()
	if err := p.count.ages.Flush(fctx, p.deps.DB); err != nil {
		p.log.WarnContext(ctx, "workers: duplicate ages not written, kept for the next flush", slog.Any("error", err))
		return
	}
	p.testSignals.DuplicateAgesFlushed.Signal(struct{}{})
}
