package shop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
VALUES ($1, $2, $3, now())
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE order_status.version < EXCLUDED.version`

// TrackStatus is the shipping.track_status handler: a versioned upsert of
// the order's status.
func TrackStatus(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var s OrderStatusChanged
	if err := decodeStrict(ev.Payload, &s); err != nil {
		return consumer.Permanent(fmt.Errorf("shipping.track_status: payload: %w", err))
	}
	switch {
	case s.OrderID == uuid.Nil:
		return consumer.Permanent(errors.New("shipping.track_status: payload: order_id: required"))
	case s.Status == "" || len(s.Status) > 64:
		return consumer.Permanent(errors.New("shipping.track_status: payload: status: 1 to 64 bytes required"))
	case s.Version < 1:
		return consumer.Permanent(errors.New("shipping.track_status: payload: version: must be >= 1"))
	}
	if _, err := tx.Exec(ctx, trackSQL, s.OrderID, s.Status, s.Version); err != nil {
		return fmt.Errorf("shipping.track_status: upsert order %s: %w", s.OrderID, err)
	}
	return nil
}

// decodeStrict decodes a payload refusing unknown fields and trailing data.
// The envelope codec has already refused duplicate keys, invalid UTF-8 and
// NUL characters.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
