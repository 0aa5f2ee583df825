package workers

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testlog"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker"
)

// vhostQueues lists the queues of the vhost of url (rabbitmqctl: no
// management plugin needed).
func vhostQueues(t testing.TB, url string) []string {
	t.Helper()
	vhost := url[strings.LastIndex(url, "/")+1:]
	out := rabbitmqctl(t, "list_queues", "-p", vhost, "--quiet", "--no-table-headers", "name")
	return strings.Fields(out)
}

// channelOn opens a connection and channel to url for the test's own
// declarations, closed when the test ends.
func channelOn(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// An older version's per-pool delay queues are moved, at pool start, into
// the shared delay queues of the same delays, routed back to the pool's
// queue, each message once, and deleted once empty: classic ones with
// if-empty, quorum ones (which do not support it) after an empty check.
func TestOldRetryQueuesMovedToSharedDelays(t *testing.T) {
	t.Parallel()
	for _, queueType := range []string{amqp.QueueTypeClassic, amqp.QueueTypeQuorum} {
		t.Run(queueType, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t, withVhost)
			b.cfg.QueueType = queueType
			b.cfg.RetryDelays = []time.Duration{time.Second, time.Minute}
			// Old queues as an older version declared them: one of a
			// configured delay, one of a default delay no longer
			// configured. Their delays are long enough not to expire
			// during the test.
			old := map[time.Duration]int{time.Minute: 3, 10 * time.Minute: 5}
			ch := channelOn(t, b.url)
			bodies := map[string]bool{}
			for d, n := range old {
				name := broker.OldRetryQueue(b.queue, d)
				_, err := ch.QueueDeclare(name, true, false, false, false, oldRetryArgs(queueType, b.queue, d))
				require.NoError(t, err)
				for i := range n {
					body := name + "#" + string(rune('a'+i))
					bodies[body] = true
					require.NoError(t, ch.PublishWithContext(b.ctx, "", name, false, false, amqp.Publishing{
						DeliveryMode: amqp.Persistent, Body: []byte(body),
						Headers: amqp.Table{broker.HeaderAttempt: int32(2), broker.HeaderOriginalRoutingKey: "order.order.placed.v1"},
					}))
				}
			}
			require.Eventually(t, func() bool {
				q, err := ch.QueueDeclarePassive(broker.OldRetryQueue(b.queue, 10*time.Minute), true, false, false, false, nil)
				require.NoError(t, err)
				return q.Messages == 5
			}, 10*time.Second, 10*time.Millisecond)

			p := b.start("test.probe")
			require.Equal(t, 8, p.testSignals.OldRetryDrained.WaitOrTimeout(), "every message moved once")

			require.ElementsMatch(t, []string{b.queue, broker.DelayQueue(time.Second), broker.DelayQueue(time.Minute), broker.DelayQueue(10 * time.Minute)},
				vhostQueues(t, b.url), "the old queues are gone; the shared ones hold what they held")
			for d, n := range old {
				shared := broker.DelayQueue(d)
				got := 0
				for {
					m, ok, err := ch.Get(shared, true)
					require.NoError(t, err)
					if !ok {
						break
					}
					got++
					require.True(t, bodies[string(m.Body)], "unknown or doubled message %q", m.Body)
					delete(bodies, string(m.Body))
					require.Equal(t, b.queue, m.RoutingKey, "routed back to the pool's queue by its routing key")
					require.Equal(t, 2, broker.AttemptOf(m.Headers))
					require.Equal(t, "order.order.placed.v1", broker.OriginalRoutingKey(&m))
				}
				require.Equal(t, n, got, shared)
			}
			require.Empty(t, bodies, "nothing lost")
		})
	}
}

// A retried event waits each of its pool's delays, measured by when its
// handler is called, while a steady load flows through the same pool
// (quorum queues, the default): never less than the configured delay (the
// copy's TTL starts after the call), and less than half as much again, so
// each attempt waited its own delay and not the next one's. How late it
// comes back is the machine's load, not the delay: a bound of 10% failed
// beside other work (1.254 s for 1 s) with nothing wrong.
func TestRetryDelaysMeasuredUnderLoad(t *testing.T) {
	t.Parallel()
	b := newBundle(t, withVhost)
	b.cfg.QueueType = amqp.QueueTypeQuorum
	b.cfg.RetryDelays = []time.Duration{time.Second, 2 * time.Second}
	b.start("test.probe")

	var retried []uuid.UUID
	for range 5 {
		env, _ := b.order(1)
		b.mu.Lock()
		b.failN[env.EventID] = 2
		b.mu.Unlock()
		retried = append(retried, env.EventID)
		b.publishEnv(env, nil)
	}
	done := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, id := range retried {
			if len(b.calls[id]) < 3 {
				return false
			}
		}
		return true
	}
	// The steady load: 200 events a second, each confirmed, until every
	// retried event has had its third call. Below what the pool applies
	// on this machine, so that a retry copy does not queue behind a
	// backlog in the pool's queue, which would add to its delay.
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
	load, deadline := 0, time.Now().Add(30*time.Second)
	for !done() {
		require.True(t, time.Now().Before(deadline), "retried events did not come back in time")
		<-pace.C
		env, _ := b.order(1)
		b.publishEnv(env, nil)
		load++
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range retried {
		c := b.calls[id]
		require.Len(t, c, 3)
		require.Equal(t, []int{0, 1, 2}, b.attempts[id])
		for k, want := range b.cfg.RetryDelays {
			got := c[k+1].Sub(c[k])
			t.Logf("event %s attempt %d: delay %s measured %s (%+.1f%%)", id, k+1, want, got.Round(time.Millisecond),
				100*float64(got-want)/float64(want))
			require.GreaterOrEqual(t, got, want, "attempt %d of %s came back before its delay", k+1, id)
			require.Less(t, got, want+want/2, "attempt %d of %s waited more than its own delay", k+1, id)
		}
	}
	t.Logf("load: %d events published while the retried ones waited", load)
	require.ElementsMatch(t, []string{b.queue, broker.DelayQueue(time.Second), broker.DelayQueue(2 * time.Second)}, vhostQueues(t, b.url),
		"the retries waited in the shared delay queues")
}

// Two pools in two daemons, one on quorum queues with delays [1s, 3s] and
// one on classic with [1s, 2s], share one set of delay queues in the vhost
// (1s once, used by both), declare them without a 406, and each retry
// lands back in its own pool.
func TestTwoPoolsInTwoDaemonsShareDelayQueues(t *testing.T) {
	t.Parallel()
	a := newBundle(t, withVhost)
	a.cfg.QueueType = amqp.QueueTypeQuorum
	a.cfg.RetryDelays = []time.Duration{time.Second, 3 * time.Second}
	b := newBundle(t, func(b *bundle) { b.url = a.url })
	b.cfg.QueueType = amqp.QueueTypeClassic
	b.cfg.RetryDelays = []time.Duration{time.Second, 2 * time.Second}
	var logs testlog.Buffer
	for _, x := range []*bundle{a, b} {
		x.logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	a.start("test.probe")
	b.start("test.probe")

	ids := map[*bundle][]uuid.UUID{}
	for _, x := range []*bundle{a, b} {
		for i := range 4 {
			env, _ := x.order(1)
			x.mu.Lock()
			x.failN[env.EventID] = i % 3 // 0, 1 or 2 retries
			x.mu.Unlock()
			ids[x] = append(ids[x], env.EventID)
			x.publishEnv(env, nil)
		}
	}
	for _, x := range []*bundle{a, b} {
		x.waitSettled("every event processed", func() bool { return x.pool.Info().Processed == 4 })
		x.mu.Lock()
		require.Len(t, x.attempts, 4, "only the pool's own events reach it")
		for i, id := range ids[x] {
			want := []int{0, 1, 2}[:i%3+1]
			// A batch in which another event failed is replayed event by
			// event: its other events' handlers run again at the same
			// attempt (when the machine is slow, two of these events share
			// a batch).
			require.Equal(t, want, slices.Compact(slices.Clone(x.attempts[id])), "event %d of %s", i, x.queue)
		}
		x.mu.Unlock()
	}
	require.ElementsMatch(t, []string{b.queue, a.queue, broker.DelayQueue(time.Second), broker.DelayQueue(2 * time.Second), broker.DelayQueue(3 * time.Second)},
		vhostQueues(t, a.url), "one queue per pool, one per distinct delay")
	text := logs.String()
	require.NotContains(t, text, "PRECONDITION_FAILED")
	require.NotContains(t, text, "consumer session ended")
	require.Equal(t, 1, strings.Count(text, "shared delay queue exists with other arguments"), "the classic pool says once that it uses the quorum 1s queue: %s", text)
	require.Contains(t, text, "found_type=quorum")
}

// A delay queue deleted while its pools run (by an operator) is declared
// again by the first retry that finds it missing: the original is
// requeued, and its next copy lands.
func TestDeletedDelayQueueDeclaredAgain(t *testing.T) {
	t.Parallel()
	b := newBundle(t, withVhost)
	b.cfg.RetryDelays = []time.Duration{time.Second}
	b.start("test.probe")
	vhost := b.url[strings.LastIndex(b.url, "/")+1:]
	rabbitmqctl(t, "delete_queue", "-p", vhost, broker.DelayQueue(time.Second))
	require.ElementsMatch(t, []string{b.queue}, vhostQueues(t, b.url))

	env, _ := b.order(1)
	b.mu.Lock()
	b.failN[env.EventID] = 2 // the first copy finds no queue; the second one lands
	b.mu.Unlock()
	b.publishEnv(env, nil)
	b.waitSettled("the event processed after its retry", func() bool { return b.pool.Info().Processed == 1 })
	b.mu.Lock()
	require.Equal(t, []int{0, 0, 1}, b.attempts[env.EventID], "requeued once, then retried through the delay queue")
	b.mu.Unlock()
	require.ElementsMatch(t, []string{b.queue, broker.DelayQueue(time.Second)}, vhostQueues(t, b.url))
}
