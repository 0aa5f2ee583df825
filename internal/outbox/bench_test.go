package outbox

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/platformd/platformd/internal/broker"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// outboxBenchRows is how many rows each throughput round drains
// (OUTBOX_BENCH_ROWS overrides it).
func outboxBenchRows(b *testing.B) int {
	n := 20_000
	if v := os.Getenv("OUTBOX_BENCH_ROWS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err, "OUTBOX_BENCH_ROWS")
	}
	return n
}

// benchQueue replaces the bundle's test queue with a durable quorum queue
// (platformd's default type: confirms wait for its Raft write), purged
// between rounds.
func benchQueue(b *testing.B, bb *bundle) string {
	q := "outbox-bench-" + uuid.NewString()[:8]
	_, err := bb.ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	require.NoError(b, err)
	b.Cleanup(func() {
		if ch, err := bb.amqpConn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	})
	require.NoError(b, bb.ch.QueueBind(q, "bench.#", bb.exchange, false, nil))
	return q
}

// BenchmarkOutboxThroughput compares the relay draining a backlog of
// outbox rows with a raw publisher sending the same envelopes to the same
// exchange and quorum queue, with the same confirms, mandatory flag and
// batches of 500 published before their confirms are awaited. Each round
// measures both, raw first; the metrics are the medians over rounds
// (-benchtime Nx sets the rounds).
func BenchmarkOutboxThroughput(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	q := benchQueue(b, bb)
	rows := outboxBenchRows(b)
	var raw, relay []float64
	for range b.N {
		// Raw: the envelopes the relay would build, published in batches.
		b.StopTimer()
		msgs := make([]broker.Outgoing, rows)
		for i := range msgs {
			id := uuid.Must(uuid.NewV7())
			r := row{id: id, name: "bench.outbox.v1", occurredAt: time.Now(), finite: true, payload: `{"order_id": "` + uuid.NewString() + `", "n": 1}`, headers: "{}"}
			m, err := r.message(0)
			require.NoError(b, err)
			msgs[i] = broker.Outgoing{Exchange: bb.exchange, RoutingKey: r.name, Msg: m}
		}
		pub := broker.NewPublisher(bb.broker, BatchSizeDefault)
		b.StartTimer()
		start := time.Now()
		for i := 0; i < rows; i += BatchSizeDefault {
			for _, err := range pub.Publish(ctx, msgs[i:min(i+BatchSizeDefault, rows)]) {
				require.NoError(b, err)
			}
		}
		raw = append(raw, float64(rows)/time.Since(start).Seconds())
		b.StopTimer()
		pub.Close()
		_, err := bb.ch.QueuePurge(q, false)
		require.NoError(b, err)

		// Relay: the same number of rows, committed before it starts.
		_, err = bb.check.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload)
			SELECT platform.uuid_v7(), 'bench.outbox.v1', jsonb_build_object('order_id', gen_random_uuid(), 'n', 1)
			FROM generate_series(1, $1)`, rows)
		require.NoError(b, err)
		done := make(chan struct{})
		var once sync.Once
		var confirmed int
		r, err := New(Config{Service: "bench", DB: bb.db, Broker: bb.broker, Exchange: bb.exchange, Metrics: bb.metrics, Logger: bb.logger,
			Test: RelayTest{AfterConfirmFunc: func(ids []uuid.UUID) {
				if confirmed += len(ids); confirmed >= rows {
					once.Do(func() { close(done) })
				}
			}}})
		require.NoError(b, err)
		b.StartTimer()
		start = time.Now()
		require.NoError(b, r.Start(ctx))
		<-done
		waitFor(b, time.Minute, "the last delete", func() bool { return bb.pending() == 0 })
		relay = append(relay, float64(rows)/time.Since(start).Seconds())
		b.StopTimer()
		r.Stop()
		_, err = bb.ch.QueuePurge(q, false)
		require.NoError(b, err)
	}
	rawMed, relayMed := median(raw), median(relay)
	b.ReportMetric(rawMed, "raw_msgs/s")
	b.ReportMetric(relayMed, "relay_msgs/s")
	b.ReportMetric(relayMed/rawMed, "relay/raw")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkOutboxLatency commits one outbox row per transaction at 1,000
// rows/s (a few writers, one commit each: one writer alone cannot flush
// the WAL a thousand times a second here) and measures each row's time from
// its commit returning to the writer to its confirm by the broker (the
// relay's confirm hook): p50, p99 and max over the run, and the rate the
// writers reached. A confirm that lands before the writer saw its commit
// return counts as 0 (rows/early says how many did). Each op is one row;
// -benchtime 5000x measures five seconds.
func BenchmarkOutboxLatency(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	benchQueue(b, bb)
	var mu sync.Mutex
	sent := map[uuid.UUID]bool{}
	committed := map[uuid.UUID]time.Time{}
	confirmed := map[uuid.UUID]time.Time{}
	done := make(chan struct{})
	var once sync.Once
	r, err := New(Config{Service: "bench", DB: bb.db, Broker: bb.broker, Exchange: bb.exchange, Metrics: bb.metrics, Logger: bb.logger,
		Test: RelayTest{AfterConfirmFunc: func(ids []uuid.UUID) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if sent[id] {
					confirmed[id] = now
				}
			}
			if len(confirmed) == b.N {
				once.Do(func() { close(done) })
			}
		}}})
	require.NoError(b, err)
	require.NoError(b, r.Start(ctx))
	defer r.Stop()
	waitFor(b, 10*time.Second, "the relay to become active", r.Active)
	// Warm up: connections, the broker channel, the plans.
	for range 50 {
		_, err := bb.check.Exec(ctx, `SELECT platform.publish('bench.warm', '{}')`)
		require.NoError(b, err)
	}
	waitFor(b, 10*time.Second, "the warm-up rows to leave", func() bool { return bb.pending() == 0 })

	ids := make(chan uuid.UUID, 64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				_, err := bb.check.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload) VALUES ($1, 'bench.latency', '{}')`, id)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				committed[id] = now
				mu.Unlock()
			}
		})
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		<-tick.C
		id := uuid.Must(uuid.NewV7())
		mu.Lock()
		sent[id] = true
		mu.Unlock()
		ids <- id
	}
	close(ids)
	wg.Wait()
	rate := float64(b.N) / time.Since(start).Seconds()
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatal("not every row was confirmed within a minute")
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, b.N)
	early := 0
	for id, t0 := range committed {
		l := confirmed[id].Sub(t0)
		if l < 0 {
			l, early = 0, early+1
		}
		lat = append(lat, l)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max_ms")
	b.ReportMetric(rate, "rows/s")
	b.ReportMetric(float64(early), "rows/early")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
