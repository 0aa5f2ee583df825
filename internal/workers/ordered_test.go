package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// An ordered pool keeps a key's events behind its failed one: with key K's
// second event failing until it is fixed, K's later events are stored
// parked (also one published while the pool is down, across a restart),
// every other key is applied in full meanwhile; once the head's retry
// applies, the parked events are released and applied in their order.
func TestOrderedFailuresKeepAKeysEventsInOrder(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.PartitionKey = "/order_id"
	b.cfg.OrderedFailures = true
	_, err := b.check.Exec(b.ctx, `CREATE TABLE applied (seq bigint GENERATED ALWAYS AS IDENTITY, event_id uuid, order_id uuid, n int)`)
	require.NoError(t, err)
	b.reg.MustRegister(consumer.Registration{Name: "test.sequence", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			var p struct {
				OrderID uuid.UUID `json:"order_id"`
				N       int       `json:"n"`
			}
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO applied (event_id, order_id, n) VALUES ($1, $2, $3)`, ev.ID, p.OrderID, p.N)
			return err
		})})
	b.start("test.probe", "test.sequence")

	const keys, perKey = 200, 6
	events := make([][]envelope.Envelope, keys)
	for k := range keys {
		order := uuid.New()
		for n := range perKey {
			payload := fmt.Sprintf(`{"order_id":%q,"n":%d}`, order, n)
			events[k] = append(events[k], envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced,
				OccurredAt: time.Now().UTC().Truncate(time.Millisecond), Payload: json.RawMessage(payload)})
		}
	}
	const bad = 7
	head := events[bad][2]
	b.mu.Lock()
	b.failN[head.EventID] = 1 << 30 // fails every attempt until fixed
	b.mu.Unlock()
	for n := range perKey - 1 {
		for k := range keys {
			b.publishEnv(events[k][n], nil)
		}
	}
	want := keys*(perKey-1) - (perKey - 1 - 2) // every event but key 7's from the third on
	b.waitFor("the other keys applied, key 7's head failed, its followers parked", func() bool {
		return b.count(`SELECT count(*) FROM applied`) == want &&
			b.count(`SELECT count(*) FROM platform.failed_event WHERE state = 'failed' AND reason = 'retries_exhausted' AND event_id = $1`, head.EventID) == 1 &&
			b.count(`SELECT count(*) FROM platform.failed_event WHERE state = 'parked'`) == perKey-1-3
	})
	require.Equal(t, 0, b.count(`SELECT count(*) FROM applied WHERE event_id = $1`, head.EventID))

	// Across a restart: the key is still held, by the store, for an event
	// published while no pool ran.
	b.stop()
	b.start("test.probe", "test.sequence")
	b.publishEnv(events[bad][perKey-1], nil)
	b.waitFor("the late event parked too", func() bool {
		return b.count(`SELECT count(*) FROM platform.failed_event WHERE state = 'parked'`) == perKey-1-2
	})
	var parkedKey string
	require.NoError(t, b.check.QueryRow(b.ctx, `SELECT DISTINCT sequence_key FROM platform.failed_event WHERE state = 'parked'`).Scan(&parkedKey))
	var headRow uuid.UUID
	require.NoError(t, b.check.QueryRow(b.ctx, `SELECT id FROM platform.failed_event WHERE event_id = $1 AND sequence_key = $2`, head.EventID, parkedKey).Scan(&headRow))

	// Fixed: the head's retry applies it, and its followers follow.
	b.mu.Lock()
	b.failN[head.EventID] = 0
	b.mu.Unlock()
	b.publishEnv(head, amqp.Table{failure.HeaderFailureID: headRow.String(), broker.HeaderReplay: "retry-failed:test"})
	b.waitFor("every event applied", func() bool { return b.count(`SELECT count(*) FROM applied`) == keys*perKey-(keys-1) })
	b.waitFor("every row resolved", func() bool {
		return b.count(`SELECT count(*) FROM platform.failed_event WHERE state <> 'resolved'`) == 0
	})
	rows, err := b.check.Query(b.ctx, `SELECT n FROM applied WHERE order_id = (SELECT order_id FROM applied WHERE event_id = $1) ORDER BY seq`, head.EventID)
	require.NoError(t, err)
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, ns, "key 7's events applied once each, in order")
	require.Equal(t, 0, b.count(`SELECT count(*) FROM (SELECT event_id FROM applied GROUP BY event_id HAVING count(*) > 1) d`), "nothing applied twice")
}
