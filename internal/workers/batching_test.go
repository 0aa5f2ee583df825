package workers

import (
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/metrics"
)

// A worker lingers for batch.wait only while its batches come at least
// half full: busy, it waits for stragglers; idle, a lone delivery is a
// batch at once, and one arriving a moment later is the next batch.
func TestCollectLingersOnlyWhenBusy(t *testing.T) {
	t.Parallel()
	p := &Pool{cfg: Config{Concurrency: 1, Prefetch: 4, BatchSize: 4, BatchWait: time.Minute}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := newWorker(p, 0)
	deliveries := make(chan amqp.Delivery)
	sendLater := func(tags ...uint64) *sync.WaitGroup {
		var wg sync.WaitGroup
		wg.Go(func() {
			// The scenario, not a wait: a delivery that arrives after
			// collect returned (idle) or while it lingers (busy).
			time.Sleep(50 * time.Millisecond) //nolint:forbidigo // the scenario, said above
			for _, tag := range tags {
				deliveries <- amqp.Delivery{DeliveryTag: tag}
			}
		})
		return &wg
	}
	tags := func(batch []message) []uint64 {
		var out []uint64
		for _, m := range batch {
			out = append(out, m.d.DeliveryTag)
		}
		return out
	}

	// Idle (no previous batch, then a batch of one): each lone delivery
	// goes at once.
	sent := sendLater(2)
	require.Equal(t, []uint64{1}, tags(w.collect(amqp.Delivery{DeliveryTag: 1}, deliveries)))
	require.Equal(t, []uint64{2}, tags(w.collect(<-deliveries, deliveries)))
	sent.Wait()

	// Busy (the previous batch was full): the worker waits for the rest.
	w.lastBatch = 4
	sent = sendLater(4, 5, 6)
	require.Equal(t, []uint64{3, 4, 5, 6}, tags(w.collect(amqp.Delivery{DeliveryTag: 3}, deliveries)))
	sent.Wait()
	require.Equal(t, 4, w.lastBatch)

	// A half-full previous batch keeps the worker lingering.
	w.lastBatch = 2
	sent = sendLater(8)
	require.Equal(t, []uint64{7, 8}, tags(w.collect(amqp.Delivery{DeliveryTag: 7}, closeAfter(deliveries, 8))))
	sent.Wait()
}

// A prefetch capped below a batch per worker (config's max_unacked_bytes)
// stays capped: the worker's channel asks for its share, not for a batch,
// and a busy worker closes its batch once the window is full instead of
// lingering for deliveries the broker will not send.
func TestCollectStopsAtThePrefetchWindow(t *testing.T) {
	t.Parallel()
	p := &Pool{cfg: Config{Concurrency: 2, Prefetch: 8, BatchSize: 1000, BatchWait: time.Minute}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := newWorker(p, 0)
	require.Equal(t, 4, w.prefetch, "each of two workers gets half the capped prefetch")
	w.lastBatch = 4 // busy: its last batch filled the window
	deliveries := make(chan amqp.Delivery, 8)
	for tag := uint64(2); tag <= 4; tag++ {
		deliveries <- amqp.Delivery{DeliveryTag: tag}
	}
	done := make(chan []message, 1)
	go func() { done <- w.collect(amqp.Delivery{DeliveryTag: 1}, deliveries) }()
	select {
	case batch := <-done:
		require.Len(t, batch, 4)
	case <-time.After(10 * time.Second):
		t.Fatal("a busy worker waited for a batch larger than its prefetch window")
	}
}

// An idle worker keeps a batch open while deliveries keep coming within
// idleLinger of each other (a backlog handed over one at a time), up to
// batch.wait, and closes it once a gap is longer.
func TestCollectIdleFollowsAStream(t *testing.T) {
	t.Parallel()
	p := &Pool{cfg: Config{Concurrency: 1, Prefetch: 8, BatchSize: 8, BatchWait: time.Minute}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := newWorker(p, 0)
	w.idleLinger = 250 * time.Millisecond // generous, so that scheduling noise cannot matter
	deliveries := make(chan amqp.Delivery)
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, step := range []struct {
			after time.Duration
			tag   uint64
		}{{150 * time.Millisecond, 2}, {150 * time.Millisecond, 3}, {150 * time.Millisecond, 4}, {time.Second, 5}} {
			time.Sleep(step.after) //nolint:forbidigo // the scenario: the gaps between arrivals
			deliveries <- amqp.Delivery{DeliveryTag: step.tag}
		}
	})
	// 2, 3 and 4 come 150 ms apart: one batch, although 3 and 4 come more
	// than an idleLinger after the start; 5 comes a second later.
	var got []uint64
	for _, m := range w.collect(amqp.Delivery{DeliveryTag: 1}, deliveries) {
		got = append(got, m.d.DeliveryTag)
	}
	require.Equal(t, []uint64{1, 2, 3, 4}, got)
	require.Equal(t, uint64(5), (<-deliveries).DeliveryTag)
	wg.Wait()
}

// closeAfter forwards in to a new channel and closes it after the delivery
// tagged last: collect returns what it has when its channel closes.
func closeAfter(in <-chan amqp.Delivery, last uint64) <-chan amqp.Delivery {
	out := make(chan amqp.Delivery)
	go func() {
		defer close(out)
		for d := range in {
			out <- d
			if d.DeliveryTag == last {
				return
			}
		}
	}()
	return out
}

// At low load a lone event is committed at once, not after batch.wait
// (here a minute, longer than the test waits).
func TestPoolLoneEventIsNotHeldForBatchWait(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.BatchWait = 1, config.BatchSizeDefault, time.Minute
	b.cfg.Prefetch = 2 * config.BatchSizeDefault // as the default derives it, per worker
	b.start(shop.HandlerStockReserve)
	for i := 1; i <= 2; i++ {
		env, _ := b.order(1)
		b.publishEnv(env, nil)
		b.waitFor("the lone event committed", func() bool { return b.reservations() == i })
	}
}

// Batch size 1 with a backlog: each event is its own transaction, but the
// acks of consecutive events are merged into one multiple ack (at most a
// quarter of the prefetch window held back, plus the batch that sends it), which is what lets batch size 1
// cost the broker less than an ack per message. Every delivery is acked
// once the backlog is gone, and the counters, which move when the ack is
// sent, say so while the pool still runs.
func TestPoolBatchSizeOneMergesAcks(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.Prefetch = 1, 1, 200
	var mu sync.Mutex
	var acks []uint64
	b.cfg.testAckFunc = func(_ int, tag uint64) {
		mu.Lock()
		acks = append(acks, tag)
		mu.Unlock()
	}
	p := b.start(shop.HandlerStockReserve)
	const distinct, copies = 400, 40
	b.backlog(p, distinct, copies)

	settled := func() float64 {
		return b.outcomeCount(metrics.OutcomeProcessed) + b.outcomeCount(metrics.OutcomeDuplicate)
	}
	b.waitFor("every delivery acked and counted", func() bool {
		return settled() == distinct+copies && b.queueDepth(b.queue) == 0 && p.Info().InFlight == 0
	})
	require.Equal(t, distinct, b.reservations())
	require.Equal(t, distinct, b.count(`SELECT count(*) FROM processed_event`))

	mu.Lock()
	got := slices.Clone(acks)
	mu.Unlock()
	require.True(t, slices.IsSorted(got), "acks in tag order: %v", got)
	require.Equal(t, uint64(distinct+copies), got[len(got)-1], "the last ack covers the last delivery")
	require.LessOrEqual(t, len(got), (distinct+copies)/5, "acks merged: %d acks for %d deliveries", len(got), distinct+copies)
	for i := 1; i < len(got); i++ {
		require.LessOrEqual(t, got[i]-got[i-1], uint64(50+1), "an ack holds back at most a quarter of the prefetch window, then goes with the next batch's")
	}

	// Nothing unacked either: a stop would put it back in the queue.
	b.stop()
	require.Equal(t, 0, b.queueDepth(b.queue))
	t.Logf("%d deliveries, %d acks", distinct+copies, len(got))
}

func (b *bundle) outcomeCount(outcome string) float64 {
	return testutil.ToFloat64(b.metrics.MessagesTotal.WithLabelValues(b.cfg.Service, b.cfg.Name, outcome))
}

// Held acks under broker faults: batch size 1 with a backlog (acks held
// and merged), every connection closed by the operator twice mid-drain.
// The acks held when a channel died are lost; their deliveries come back
// redelivered and are skipped as duplicates: every event applied once.
func TestPoolHeldAcksSurviveBrokerFaults(t *testing.T) {
	t.Parallel()
	b := newBundle(t, withVhost)
	b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.Prefetch = 2, 1, 200
	var acks atomic.Int64
	b.cfg.testAckFunc = func(int, uint64) { acks.Add(1) }
	p := b.start(shop.HandlerStockReserve, "test.probe")
	const distinct, copies = 1500, 150
	b.backlog(p, distinct, copies)

	vhost := b.url[len(testenv.AMQPURL()):]
	for range 2 {
		// Each close lands mid-drain, after progress since the last one:
		// every worker is held in a batch's handler, its transaction open
		// and its earlier acks held, while rabbitmqctl (slow to start:
		// the backlog could drain meanwhile) closes the connections.
		before := b.reservations()
		b.waitFor("some progress", func() bool { return b.reservations() > before+100 })
		release := b.holdHandlers()
		b.waitFor("every worker in a handler", func() bool { return b.holding.Load() == int32(b.cfg.Concurrency) })
		out, err := exec.Command("rabbitmqctl", "close_all_connections", "-p", vhost, "held-ack test").CombinedOutput()
		release()
		require.NoError(t, err, string(out))
		require.Less(t, b.reservations(), distinct, "the close came before the end of the backlog")
	}
	b.waitFor("all applied", func() bool {
		return b.reservations() == distinct && b.queueDepth(b.queue) == 0 && p.Info().InFlight == 0
	})
	b.stop() // every batch in hand finishes and settles: nothing can apply later
	require.Equal(t, distinct, b.reservations(), "applied exactly once")
	require.Equal(t, distinct, b.count(`SELECT count(*) FROM processed_event`))
	require.Less(t, acks.Load(), int64(distinct+copies)/2, "acks were held and merged")
	t.Logf("acks %d for %d messages; redelivered duplicates %.0f", acks.Load(), distinct+copies, b.dupCount(metrics.SourceRedelivery))
}

// A stop in the middle of a backlog sends the held ack: afterwards every
// message is either applied or back in the queue, never both (a committed
// delivery left unacked would come back and be counted twice).
func TestPoolStopSendsHeldAck(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.Prefetch = 2, 1, 200
	p := b.start(shop.HandlerStockReserve)
	const n = 2000
	b.backlog(p, n, 0)
	b.waitFor("some applied", func() bool { return b.reservations() >= 200 })
	b.stop()
	applied, left := b.reservations(), b.queueDepth(b.queue)
	require.Less(t, applied, n, "stopped mid-backlog")
	require.Equal(t, n, applied+left, "applied %d + left %d", applied, left)
	require.InDelta(t, float64(applied), b.outcomeCount(metrics.OutcomeProcessed), 0, "every applied event acked and counted")
}

// backlog pauses p, queues distinct events and copies of that many of them
// (republishes), waits until the broker holds them all, and resumes p:
// the pool starts on a backlog.
func (b *bundle) backlog(p *Pool, distinct, copies int) {
	b.t.Helper()
	_, err := p.Pause(b.ctx, "pre-load", "test")
	require.NoError(b.t, err)
	b.publishMany(distinct, float64(copies)/float64(distinct))
	b.waitFor("backlog loaded", func() bool { return b.queueDepth(b.queue) == distinct+copies })
	_, err = p.Resume(b.ctx, "test")
	require.NoError(b.t, err)
}
