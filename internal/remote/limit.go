package remote

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Adaptive limit's tuning (AIMD).
const (
	// AdaptiveInitialDefault is the adaptive limit's start when the
	// handler has no max_in_flight.
	AdaptiveInitialDefault = 4
	// AdaptiveMaxDefault caps the adaptive limit when the handler has no
	// max_in_flight.
	AdaptiveMaxDefault = 256
	// adaptiveBackoff is the multiplicative decrease on overload.
	adaptiveBackoff = 0.5
	// adaptiveLatencyTolerance: a smoothed latency (per event) above this
	// many times the lowest seen counts as a sign of overload.
	adaptiveLatencyTolerance = 3.0
	// adaptiveProbeAfter is how long the limit stays under the level that
	// last overloaded the handler before it probes above it again.
	adaptiveProbeAfter = 30 * time.Second
)

// callLimiter bounds a remote handler's calls at once in this daemon,
// across every pool running it: a fixed limit (max_in_flight), or an
// adaptive one (concurrency: adaptive), which follows the handler's
// answers by AIMD: +1 per limit's worth of calls answered in time, halved
// on a 429, a 503 (any "unavailable" answer), a timeout or a latency per
// event (smoothed) more than three times the lowest seen, once per wave of calls (those
// sent before a decrease do not decrease it again). The level that
// overloaded the handler is remembered: the limit grows back to just under
// it and probes above it only adaptiveProbeAfter later, so that it settles
// instead of hitting the handler's capacity every few calls. AIMD rather
// than Netflix's gradient: the contract's overload signals are explicit
// (429/503), and a call's latency grows with its batch's size, which a
// gradient over latency would read as queueing. Safe for concurrent use.
type callLimiter struct {
	mu       sync.Mutex
	adaptive bool
	// limit is the calls allowed at once (a float: AIMD's additive step
	// is 1/limit per call); max bounds it.
	limit    float64
	max      int
	inFlight int
	// minLatency is the lowest latency seen, drifting up slowly so that a
	// handler that got slower for good is not judged by its past.
	minLatency time.Duration
	// smoothed is the latency per event's moving average (1/10 weight).
	smoothed time.Duration
	// ceiling is the level that last overloaded the handler (0: none),
	// decreased when; the limit stays under ceiling until probeAt.
	ceiling   int
	decreased time.Time
	probeAt   time.Time
	wake      chan struct{} // closed and replaced when a slot frees
	gauge     prometheus.Gauge
	// signals are the handler's test signals (SlotWaited, LimitChanged);
	// nil in a limiter of its own.
	signals *HandlerTestSignals
}

// newCallLimiter returns the limiter of a handler with maxInFlight (0:
// none) and adaptive; nil when neither (no limit, no cost).
func newCallLimiter(maxInFlight int, adaptive bool) *callLimiter {
	if maxInFlight <= 0 && !adaptive {
		return nil
	}
	l := &callLimiter{adaptive: adaptive, max: maxInFlight, wake: make(chan struct{})}
	switch {
	case !adaptive:
		l.limit = float64(maxInFlight)
	case maxInFlight > 0:
		l.limit = float64(min(AdaptiveInitialDefault, maxInFlight))
	default:
		l.max = AdaptiveMaxDefault
		l.limit = AdaptiveInitialDefault
	}
	return l
}

// setGauge sets the limit's metric (and reports the limit now).
func (l *callLimiter) setGauge(g prometheus.Gauge) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gauge = g
	g.Set(math.Floor(l.limit))
}

// Limit returns the calls allowed at once now.
func (l *callLimiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// acquire waits for a slot, or ctx's end.
func (l *callLimiter) acquire(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.inFlight < int(l.limit) {
			l.inFlight++
			l.mu.Unlock()
			return nil
		}
		wake, limit := l.wake, int(l.limit)
		l.mu.Unlock()
		if l.signals != nil {
			l.signals.SlotWaited.Signal(limit)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release frees a slot and, adaptive, moves the limit by the call's
// outcome: overloaded (429/503/timeout/unreachable) or answered in d.
// start is when the call was sent.
func (l *callLimiter) release(overloaded bool, start time.Time, d time.Duration, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	if l.adaptive && counted {
		l.adaptLocked(overloaded, start, d)
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *callLimiter) adaptLocked(overloaded bool, start time.Time, d time.Duration) {
	before := int(l.limit)
	if !overloaded {
		if l.minLatency == 0 || d < l.minLatency {
			l.minLatency = d
		} else {
			l.minLatency += (d - l.minLatency) / 1000 // drift up slowly
		}
		if l.smoothed == 0 {
			l.smoothed = d
		}
		l.smoothed += (d - l.smoothed) / 10
		if float64(l.smoothed) > adaptiveLatencyTolerance*float64(l.minLatency) && l.smoothed > time.Millisecond {
			overloaded = true
			l.smoothed = l.minLatency * 2 // judge the next wave afresh
		}
	}
	now := time.Now()
	switch {
	case overloaded && start.Before(l.decreased):
		// Sent before the last decrease: that wave is answered already.
	case overloaded:
		l.ceiling = int(l.limit)
		l.decreased, l.probeAt = now, now.Add(adaptiveProbeAfter)
		l.limit = max(1, math.Floor(l.limit*adaptiveBackoff))
	default:
		top := float64(l.max)
		if l.ceiling > 0 && now.Before(l.probeAt) {
			top = min(top, float64(max(l.ceiling-1, 1)))
		}
		l.limit = max(min(top, l.limit+1/l.limit), 1)
	}
	if int(l.limit) != before {
		if l.gauge != nil {
			l.gauge.Set(math.Floor(l.limit))
		}
		if l.signals != nil {
			// Signal never blocks: safe under l.mu, and CallLimit
			// reports this value until the next change.
			l.signals.LimitChanged.Signal(int(l.limit))
		}
	}
}
