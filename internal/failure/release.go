package failure

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dbutil"
)

// Copy is a stored failure as a copy sends it back to its pool's queue.
type Copy struct {
	ID         uuid.UUID
	EventID    uuid.UUID
	RoutingKey string
	// Headers are the stored headers, as JSON.
	Headers []byte
	// Body is the edited body if any, else the original.
	Body []byte
}

func (c *Copy) dest() []any { return []any{&c.ID, &c.EventID, &c.RoutingKey, &c.Headers, &c.Body} }

type releaseParams struct {
	Pool  string
	Limit int
}

// ReleaseParked sends back, through send, at most limit parked events of
// pool whose key no longer has an unresolved failure before them, in id
// (arrival) order, and marks them retrying once send returned (their
// copies confirmed). A failure of send leaves them parked; a crash
// between send and the mark sends them again next time, which the dedup
// step makes harmless (the second copy is a duplicate, and resolving is
// conditional). It returns how many were released.
func (s *Store) ReleaseParked(ctx context.Context, pool string, limit int, send func(ctx context.Context, copies []Copy) error) (int, error) {
	n, err := dbutil.WithTxV(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (int, error) {
		copies, err := releasable.All(ctx, tx, releaseParams{Pool: pool, Limit: limit})
		if err != nil || len(copies) == 0 {
			return 0, err
		}
		if err := send(ctx, copies); err != nil {
			return 0, err
		}
		ids := make([]uuid.UUID, len(copies))
		for i := range copies {
			ids[i] = copies[i].ID
		}
		if _, err := markReleased.Run(ctx, tx, ids); err != nil {
			return 0, err
		}
		return len(copies), nil
	})
	if err != nil {
		return 0, fmt.Errorf("failure: release parked events of %s: %w", pool, err)
	}
	return n, nil
}

// Publishing returns c as it goes back to its pool's queue: its body,
// persistent JSON, its stored headers without the bookkeeping of earlier
// attempts (it starts over at attempt 0), x-failure-id set to its row and
// the original routing key. A retry adds its own marks on top (sender's
// copyOf); a release sends it as it is.
func (c *Copy) Publishing() (amqp.Publishing, error) {
	h, err := retryHeaders(c.Headers)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("failure: headers of %s: %w", c.ID, err)
	}
	h[HeaderFailureID] = c.ID.String()
	h[broker.HeaderOriginalRoutingKey] = c.RoutingKey
	return amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: h, Body: c.Body}, nil
}
