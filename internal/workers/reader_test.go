package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/envelope"
)

const keyedEvent = "test.keyed.v1"

// keyed is a bundle whose pool handles keyed events: each event locks its
// key's row with NOWAIT (failing at once if another transaction holds it)
// and records its sequence number in apply order.
type keyed struct {
	*bundle
	conflicts atomic.Int64
}

func newKeyed(t *testing.T, partitionKey string, opts ...bundleOpt) *keyed {
	t.Helper()
	k := &keyed{bundle: newBundle(t, opts...)}
	_, err := k.check.Exec(k.ctx, `CREATE TABLE key_lock (k uuid PRIMARY KEY);
		CREATE TABLE applied (n bigserial PRIMARY KEY, k uuid NOT NULL, seq int NOT NULL)`)
	require.NoError(t, err)
	k.reg.MustRegister(consumer.Registration{Name: "test.keyed", Events: []string{keyedEvent}, Handler: consumer.HandlerFunc(k.handle)})
	k.cfg.Bindings = []string{keyedEvent}
	k.cfg.Concurrency, k.cfg.BatchSize, k.cfg.Prefetch = 4, 10, 200
	k.cfg.PartitionKey = partitionKey
	return k
}

func (k *keyed) handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var p struct {
		K   uuid.UUID `json:"k"`
		Seq int       `json:"seq"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return consumer.Permanent(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO key_lock VALUES ($1) ON CONFLICT DO NOTHING`, p.K); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM key_lock WHERE k = $1 FOR UPDATE NOWAIT`, p.K); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			k.conflicts.Add(1) // another transaction holds this key now
		}
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO applied (k, seq) VALUES ($1, $2)`, p.K, p.Seq)
	return err
}

// backlogKeyed queues perKey events for each of keys keys while p is
// paused, then resumes it: the workers start on a backlog, where their
// batches overlap.
func (k *keyed) backlogKeyed(p *Pool, keys, perKey int) {
	k.t.Helper()
	_, err := p.Pause(k.ctx, "pre-load", "test")
	require.NoError(k.t, err)
	k.publishKeyed(keys, perKey)
	k.waitFor("backlog loaded", func() bool { return k.queueDepth(k.queue) == keys*perKey })
	_, err = p.Resume(k.ctx, "test")
	require.NoError(k.t, err)
}

// publishKeyed publishes perKey events for each of keys keys, interleaved,
// each key's in sequence order, and returns the keys.
func (k *keyed) publishKeyed(keys, perKey int) []uuid.UUID {
	k.t.Helper()
	ids := make([]uuid.UUID, keys)
	for i := range ids {
		ids[i] = uuid.New()
	}
	for seq := range perKey {
		for _, id := range ids {
			payload := fmt.Appendf(nil, `{"k":%q,"seq":%d}`, id, seq)
			k.publishEnv(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: keyedEvent,
				OccurredAt: time.Now().UTC(), Payload: payload}, nil)
		}
	}
	return ids
}

// inOrder reports whether every key's events were applied in sequence
// order, each once.
func (k *keyed) inOrder(perKey int) {
	k.t.Helper()
	next := map[uuid.UUID]int{}
	rows, err := k.check.Query(k.ctx, `SELECT k, seq FROM applied ORDER BY n`)
	require.NoError(k.t, err)
	var key uuid.UUID
	var seq int
	_, err = pgx.ForEachRow(rows, []any{&key, &seq}, func() error {
		require.Equal(k.t, next[key], seq, "key %s applied out of order", key)
		next[key]++
		return nil
	})
	require.NoError(k.t, err)
	for key, n := range next {
		require.Equal(k.t, perKey, n, "key %s", key)
	}
}

// With partition_key, within one daemon one worker owns a key: no two
// transactions of the pool ever hold the same key's row at once (NOWAIT
// would fail), and each key's events are applied in delivery order.
func TestPoolPartitionKeyGivesEachKeyToOneWorker(t *testing.T) {
	t.Parallel()
	const keys, perKey = 8, 60
	k := newKeyed(t, "/k")
	k.backlogKeyed(k.start("test.keyed"), keys, perKey)
	k.waitFor("all applied", func() bool { return k.count(`SELECT count(*) FROM applied`) == keys*perKey })
	k.stop()
	require.Zero(t, k.conflicts.Load(), "no two transactions of the pool held one key at once")
	k.inOrder(perKey)
	require.Equal(t, uint64(keys*perKey), k.poolInfoAfterStop.Processed)
	require.Zero(t, k.poolInfoAfterStop.Retried)
}

// The same workload without partition_key: the workers meet on the keys,
// which is what the NOWAIT probe sees (so its zero above means something).
// Conflicting events go through the delay queues and, past the last
// attempt, to the failure queue; none is applied twice.
func TestPoolWithoutPartitionKeyWorkersShareKeys(t *testing.T) {
	t.Parallel()
	const keys, perKey = 8, 60
	k := newKeyed(t, "")
	p := k.start("test.keyed")
	k.backlogKeyed(p, keys, perKey)
	p.testSignals.BatchSettled.WaitUntil("all settled", func() bool { i := p.Info(); return i.Processed+i.Failed == keys*perKey })
	k.stop()
	t.Logf("key conflicts without partition_key: %d (retried %d, failed %d)", k.conflicts.Load(),
		k.poolInfoAfterStop.Retried, k.poolInfoAfterStop.Failed)
	require.Positive(t, k.conflicts.Load(), "four workers on eight hot keys meet")
	require.Equal(t, k.count(`SELECT count(*) FROM applied`), k.count(`SELECT count(DISTINCT (k, seq)) FROM applied`), "none applied twice")
}

// A partitioned pool's one channel closed by the operator mid-backlog, and
// a pause and resume: every event applied once and in order (a
// redelivery is a duplicate of what was committed before it).
func TestPoolPartitionedSurvivesBrokerFaultsAndPause(t *testing.T) {
	t.Parallel()
	const keys, perKey = 10, 100
	k := newKeyed(t, "/k", withVhost)
	p := k.start("test.keyed")
	vhost := k.url[len(testenv.AMQPURL()):]
	k.backlogKeyed(p, keys, perKey)
	applied := func() int { return k.count(`SELECT count(*) FROM applied`) }
	k.waitFor("a quarter applied", func() bool { return applied() >= keys*perKey/4 })
	out, err := exec.Command("rabbitmqctl", "close_all_connections", "-p", vhost, "partition test").CombinedOutput()
	require.NoError(t, err, string(out))
	k.waitFor("half applied", func() bool { return applied() >= keys*perKey/2 })
	info, err := p.Pause(k.ctx, "mid-stream", "test")
	require.NoError(t, err)
	require.Zero(t, info.InFlight, "a pause settles everything the workers were given")
	out, err = exec.Command("rabbitmqctl", "list_queues", "-p", vhost, "--quiet", "--no-table-headers", "name", "messages_unacknowledged").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), k.queue+"\t0\n", "paused: nothing held unacknowledged")
	require.GreaterOrEqual(t, k.queueDepth(k.queue), keys*perKey-applied(), "paused: the rest is ready in the queue")
	_, err = p.Resume(k.ctx, "test")
	require.NoError(t, err)
	k.waitFor("all applied", func() bool { return applied() == keys*perKey && k.queueDepth(k.queue) == 0 })
	k.stop()
	require.Zero(t, k.conflicts.Load())
	k.inOrder(perKey)
}
