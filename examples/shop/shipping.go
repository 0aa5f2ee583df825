package shop

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/go-json-experiment/json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
)

// OrderStatusChanged is the payload of order.order.status_changed.v1.
type OrderStatusChanged struct {
	OrderID uuid.UUID `json:"order_id"`
	Status  string    `json:"status"`
	Version int32     `json:"version"`
}

// trackSQL applies a status only when it is newer than the stored one: a
// copy of state needs ordering, which processed_event does not give
// (seed, step 6).
const trackSQL = `INSERT INTO order_status (order_id, status, version, updated_at)
SELECT s.order_id, s.status, s.version, now()
FROM unnest($1::uuid[], $2::text[], $3::int[]) AS s(order_id, status, version)
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE order_status.version < EXCLUDED.version`

// TrackStatus is the shipping.track_status handler for one event: a
// versioned upsert of the order's status.
func TrackStatus(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	return track(ctx, tx, []consumer.Event{ev})
}

// track is shipping.track_status over a batch: it applies a batch of
// status changes in one upsert. Applying them one by one keeps, per order,
// the first change with the highest version; so does reducing them to that
// change first (an upsert may not touch a row twice). The orders are then
// upserted in key order, so that two transactions whose batches share
// orders lock their rows in the same order: in first-seen order they
// deadlocked (40P01) on hot orders.
func track(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	latest := make(map[uuid.UUID]OrderStatusChanged, len(evs))
	var order []uuid.UUID
	for _, ev := range evs {
		var s OrderStatusChanged
		if err := decodeStrict(ev.Payload, &s); err != nil {
			return consumer.Permanent(fmt.Errorf("shipping.track_status: event %s: payload: %w", ev.ID, err))
		}
		switch {
		case s.OrderID == uuid.Nil:
			return consumer.Permanent(fmt.Errorf("shipping.track_status: event %s: payload: order_id: required", ev.ID))
		case s.Status == "" || len(s.Status) > 64:
			return consumer.Permanent(fmt.Errorf("shipping.track_status: event %s: payload: status: 1 to 64 bytes required", ev.ID))
		case s.Version < 1:
			return consumer.Permanent(fmt.Errorf("shipping.track_status: event %s: payload: version: must be >= 1", ev.ID))
		}
		cur, ok := latest[s.OrderID]
		if !ok {
			order = append(order, s.OrderID)
		}
		if !ok || s.Version > cur.Version {
			latest[s.OrderID] = s
		}
	}
	slices.SortFunc(order, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	ids := make([][16]byte, len(order))
	statuses := make([]string, len(order))
	versions := make([]int32, len(order))
	for i, id := range order {
		ids[i], statuses[i], versions[i] = id, latest[id].Status, latest[id].Version
	}
	if _, err := tx.Exec(ctx, trackSQL, ids, statuses, versions); err != nil {
		return fmt.Errorf("shipping.track_status: upsert %d orders: %w", len(ids), err)
	}
	return nil
}

// batchFunc adapts a function over a batch of events to
// consumer.BatchHandler: Handle calls it with a batch of one. The function
// must have, for a batch, exactly the effects it has for each event alone,
// in order (consumer.BatchHandler's rule).
type batchFunc func(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error

// Handle calls f with ev alone.
func (f batchFunc) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	return f(ctx, tx, []consumer.Event{ev})
}

// HandleBatch calls f with evs.
func (f batchFunc) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	return f(ctx, tx, evs)
}

// decodeStrict decodes a payload refusing unknown and duplicate members,
// members whose case differs from the field's, invalid UTF-8 and trailing
// data. It uses the JSON v2 codec (github.com/go-json-experiment/json, the
// proposal behind encoding/json/v2): strict by default and, on the
// bench's order payload, about 4x faster than encoding/json's Decoder with
// a tenth of its allocations; the v1 Decoder was a fifth of the daemon's
// CPU under load.
func decodeStrict(raw []byte, v any) error {
	return json.Unmarshal(raw, v, json.RejectUnknownMembers(true))
}
