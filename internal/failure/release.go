package failure

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
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

// releasable are the parked rows of a pool that no earlier unresolved
// failure or retrying row of their key holds back, oldest first, locked
// so that two daemons do not release the same rows at once.
var releasable = query.NewRows("failure.releasable", `SELECT p.id, coalesce(p.event_id, '00000000-0000-0000-0000-000000000000'),
		p.routing_key, p.headers, coalesce(p.edited_body, p.body)
	FROM platform.failed_event p
	WHERE p.pool = $1 AND p.sequence_key IS NOT NULL AND p.state = 'parked'
	  AND NOT EXISTS (SELECT 1 FROM platform.failed_event h
		WHERE h.pool = p.pool AND h.sequence_key = p.sequence_key AND h.id < p.id
		  AND h.state IN ('failed', 'retrying'))
	ORDER BY p.id
	LIMIT $2
	FOR UPDATE OF p SKIP LOCKED`,
	func(p releaseParams) []any { return []any{p.Pool, p.Limit} }, (*Copy).dest)

var markReleased = query.NewExec("failure.mark_released", `UPDATE platform.failed_event
	SET state = 'retrying', updated_at = now()
	WHERE id = ANY($1) AND state = 'parked'`,
	func(ids []uuid.UUID) []any { return []any{ids} })

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

// bookkeeping are the headers a copy sent back drops: the failure and
// retry bookkeeping of its earlier attempts (it starts over at attempt 0)
// and the broker's dead-lettering trail.
var bookkeeping = []string{
	"x-attempt", "x-failure-reason", "x-error", "x-failed-at", "x-platformd-publish-id", HeaderFailureID,
	"x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
	"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason", "x-delivery-count",
}

// CopyHeaders returns the AMQP headers of a copy of a stored failure: its
// stored headers without the bookkeeping of earlier attempts, with
// x-failure-id set to id. JSON numbers come back as integers when they
// are whole.
func CopyHeaders(stored []byte, id uuid.UUID) (amqp.Table, error) {
	var h map[string]any
	if len(stored) > 0 {
		if err := json.Unmarshal(stored, &h); err != nil {
			return nil, fmt.Errorf("failure: headers of %s: %w", id, err)
		}
	}
	out := make(amqp.Table, len(h)+2)
	for k, v := range h {
		out[k] = amqpValue(v)
	}
	for _, k := range bookkeeping {
		delete(out, k)
	}
	out[HeaderFailureID] = id.String()
	return out, nil
}

func amqpValue(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = amqpValue(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = amqpValue(x[i])
		}
		return out
	}
	return v
}
