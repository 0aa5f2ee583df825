package remote_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/remote"
)

// A handler that answers 503 above 3 calls at once, called by 8 workers:
// with concurrency adaptive the limit settles at 3 or under without an
// operator (no 503 in the drain's second half, never more than 3 calls at
// once there), every event is applied once, and the 503s are only ever
// "unavailable" (no attempt counted, nothing applied: the batch is
// requeued whole by the pool, as here by the worker).
func TestAdaptiveLimitSettlesUnderTheHandlersCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var inFlight, most, refused, lateRefused atomic.Int64
	var settled atomic.Bool
	var done atomic.Int64
	b.answer = func(w http.ResponseWriter, c call) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > 3 {
			refused.Add(1)
			if settled.Load() {
				lateRefused.Add(1)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if settled.Load() {
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		time.Sleep(5 * time.Millisecond) //nolint:forbidigo // the handler's service time: the scenario, not a wait
		b.answerAll(w, c)
	}
	m := metrics.New()
	h := b.handler(func(c *remote.Config) { c.Adaptive = true; c.MaxInFlight = 16; c.MaxConns = 16 })
	h.Instrument(m, nil)
	p := b.processor(dedup.Route{Name: h.Name(), Handler: h})

	const workers, batches = 8, 40
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range batches {
				evs := []consumer.Event{event(`1`), event(`2`)}
				for {
					_, err := p.Process(context.Background(), evs)
					if err == nil {
						break
					}
					var u *remote.UnavailableError
					require.ErrorAs(t, err, &u, "only unavailable")
				}
				if done.Add(1) >= workers*batches/2 {
					settled.Store(true) // the second half: learnt by now
				}
			}
		})
	}
	wg.Wait()
	t.Logf("503s: %d (after the limit settled: %d); limit now %d; most at once after settling %d",
		refused.Load(), lateRefused.Load(), h.CallLimit(), most.Load())
	require.LessOrEqual(t, h.CallLimit(), 3, "settled under the handler's capacity")
	require.LessOrEqual(t, testutil.ToFloat64(m.Limits.RemoteLimit.WithLabelValues("billing", h.Name())), 3.0)
	require.GreaterOrEqual(t, h.CallLimit(), 1)
	require.LessOrEqual(t, most.Load(), int64(3), "at most 3 at once once settled")
	require.Zero(t, lateRefused.Load(), "no 503 in the drain's second half")
	require.Equal(t, workers*batches*2, b.count(`SELECT count(*) FROM processed_event`), "every event applied once")
	require.Equal(t, workers*batches*2, b.count(`SELECT count(*) FROM invoice`))
}

// max_in_flight alone: never more calls at once than it allows.
func TestMaxInFlightBoundsCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var inFlight, most atomic.Int64
	b.answer = func(w http.ResponseWriter, c call) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) //nolint:forbidigo // the handler's service time: the scenario, not a wait
		b.answerAll(w, c)
	}
	h := b.handler(func(c *remote.Config) { c.MaxInFlight = 2; c.MaxConns = 8 })
	h.TestSignals().SlotWaited.Init(t)
	p := b.processor(dedup.Route{Name: h.Name(), Handler: h})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				_, err := p.Process(context.Background(), []consumer.Event{event(`1`)})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(2), most.Load())
	require.Equal(t, 2, h.CallLimit())
	require.Equal(t, 2, h.TestSignals().SlotWaited.WaitOrTimeout(), "calls waited for a slot at the limit")
}
