package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/testdb"
)

// The failure workbench end to end in one daemon, over the real broker and
// database: bad messages become rows, grouped by cause; a retry of the
// permanent ones with a canary stops when its canary fails again; an edit
// fixes one, and its retry applies it once and resolves its row in that
// commit; a resolved failure is not retried again.
func TestFailureWorkbenchEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, "failures_e2e")
	e := newReloadEnv(t, dsn)
	e.write(t, "", "")
	d := e.start(t)
	t.Cleanup(d.Stop)
	b := &backend{d: d}
	db, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(db.Close)

	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	publish := func(body []byte) {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "reload."+e.suffix, shop.EventOrderPlaced, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(t, err)
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	orders := make([]uuid.UUID, 3)
	events := make([]uuid.UUID, 3)
	for i := range orders {
		orders[i], events[i] = uuid.New(), uuid.Must(uuid.NewV7())
		payload := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "-%d"}]}`,
			orders[i], uuid.New(), uuid.New(), i+1)
		body, err := envelope.Encode(envelope.Envelope{EventID: events[i], EventName: shop.EventOrderPlaced,
			OccurredAt: time.Now().UTC(), Payload: json.RawMessage(payload)})
		require.NoError(t, err)
		publish(body)
	}
	publish([]byte("not an envelope"))
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM platform.failed_event WHERE state = 'failed'`) == 4
	},
		30*time.Second, 20*time.Millisecond)

	groups, err := b.ListFailureGroups(ctx, "stock", failure.Filter{}, []string{failure.GroupReason})
	require.NoError(t, err)
	require.Len(t, groups, 2)
	require.Equal(t, "permanent", groups[0].Key[failure.GroupReason])
	require.EqualValues(t, 3, groups[0].Count)
	require.Equal(t, "decode", groups[1].Key[failure.GroupReason])
	msgs, err := b.ListFailedMessages(ctx, "stock-events", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 4, "the old listing answers from the store")

	// The canary fails again (the payloads are still bad): the rest is
	// never sent.
	r, err := b.RetryFailedEvents(ctx, "", failure.RetryRequest{Filter: failure.Filter{Pool: "stock-events", Reason: "permanent"}, Canary: 1, Rate: 100}, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 3, r.Selected)
	require.Eventually(t, func() bool {
		r, err = b.GetFailureRetry(ctx, "stock", r.ID)
		require.NoError(t, err)
		return r.State == failure.RetryCanaryFailed
	}, 30*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 1, r.Sent)
	require.EqualValues(t, 1, r.FailedAgain)
	require.Equal(t, 3, count(t, db, `SELECT count(*) FROM platform.failed_event WHERE reason = 'permanent' AND state = 'failed'`),
		"the canary's row is back to failed, one row still")

	// Fix one by an edit of its payload, then retry it alone.
	var id uuid.UUID
	require.NoError(t, db.QueryRow(ctx, `SELECT id FROM platform.failed_event WHERE event_id = $1`, events[0]).Scan(&id))
	fixed := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "1.000"}]}`, orders[0], uuid.New(), uuid.New())
	ev, err := b.EditFailedEvent(ctx, id, []byte(fixed), "negative quantity", "ops")
	require.NoError(t, err)
	require.NotNil(t, ev.EditedBody)
	r, err = b.RetryFailedEvents(ctx, "stock", failure.RetryRequest{Filter: failure.Filter{IDs: []uuid.UUID{id}}}, "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err = b.GetFailureRetry(ctx, "stock", r.ID)
		require.NoError(t, err)
		return r.State == failure.RetryDone && r.Resolved == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM platform.failed_event WHERE id = $1 AND state = 'resolved' AND resolved_at IS NOT NULL`, id))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM reservation WHERE order_id = $1`, orders[0]), "applied once, with the edited payload")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM processed_event WHERE event_id = $1`, events[0]))

	_, err = b.RetryFailedEvents(ctx, "stock", failure.RetryRequest{Filter: failure.Filter{IDs: []uuid.UUID{id}}}, "ops")
	require.ErrorIs(t, err, admin.ErrFailedPrecondition, "a resolved failure is not retried")
}
